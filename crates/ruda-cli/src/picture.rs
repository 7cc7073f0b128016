//! Maps of fields on the sphere as PNG pictures: an equirectangular view
//! (longitude across from 0 to 360°, latitude down from the north pole),
//! one colour per grid point, enlarged so that small grids stay readable.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

/// How values become colours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Palette {
    /// Blue through white to red, centred on zero over `[−limit, limit]`
    /// (vorticity, differences).
    Diverging {
        /// The value drawn in full red (its negative in full blue).
        limit: f64,
    },
    /// Dark blue through green to yellow over `[low, high]` (heights).
    Sequential {
        /// The value drawn darkest.
        low: f64,
        /// The value drawn brightest.
        high: f64,
    },
}

impl Palette {
    /// A diverging palette whose limit is the largest |value| of `field`
    /// (1 if every value is zero).
    pub fn diverging_for(field: &[f64]) -> Self {
        let limit = field.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        Palette::Diverging {
            limit: if limit > 0.0 { limit } else { 1.0 },
        }
    }

    /// A sequential palette over the range of `field`.
    pub fn sequential_for(field: &[f64]) -> Self {
        let (low, high) = field
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        if low.is_finite() && high > low {
            Palette::Sequential { low, high }
        } else {
            Palette::Sequential {
                low: 0.0,
                high: 1.0,
            }
        }
    }

    /// The colour of `v` (non-finite values are drawn black).
    pub fn colour(&self, v: f64) -> [u8; 3] {
        if !v.is_finite() {
            return [0, 0, 0];
        }
        match *self {
            Palette::Diverging { limit } => {
                let t = (v / limit).clamp(-1.0, 1.0) * 0.5 + 0.5;
                ramp(
                    &[
                        [5, 48, 97],
                        [67, 147, 195],
                        [247, 247, 247],
                        [214, 96, 77],
                        [103, 0, 31],
                    ],
                    t,
                )
            }
            Palette::Sequential { low, high } => {
                let t = ((v - low) / (high - low)).clamp(0.0, 1.0);
                ramp(
                    &[
                        [68, 1, 84],
                        [59, 82, 139],
                        [33, 145, 140],
                        [94, 201, 98],
                        [253, 231, 37],
                    ],
                    t,
                )
            }
        }
    }
}

/// Linear interpolation through equally spaced colours, `t` in [0, 1].
fn ramp(stops: &[[u8; 3]], t: f64) -> [u8; 3] {
    let x = t * (stops.len() - 1) as f64;
    let i = (x.floor() as usize).min(stops.len() - 2);
    let f = x - i as f64;
    core::array::from_fn(|c| {
        let (a, b) = (f64::from(stops[i][c]), f64::from(stops[i + 1][c]));
        (a + (b - a) * f).round() as u8
    })
}

/// Errors of [`write_map`].
#[derive(Debug, thiserror::Error)]
pub enum PictureError {
    /// The field has not `nlat × nlon` values, or no values.
    #[error("a map of {nlat} x {nlon} needs {} values, got {got}", nlat * nlon)]
    Size {
        /// Latitudes.
        nlat: usize,
        /// Longitudes.
        nlon: usize,
        /// Values given.
        got: usize,
    },
    /// The file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The PNG encoder failed.
    #[error("encoding {path}: {source}")]
    Encode {
        /// The file.
        path: String,
        /// Why.
        source: png::EncodingError,
    },
}

/// The pixel size of one grid point: at least 1, and enough for a map at
/// least 720 pixels wide.
fn cell(nlon: usize) -> usize {
    720usize.div_ceil(nlon.max(1)).max(1)
}

/// Several fields `[nlat, nlon]` (rows north first) as one PNG at `path`,
/// side by side with a 4-pixel gap, each in its palette.
///
/// # Errors
/// [`PictureError::Size`] for a field of the wrong size or no fields;
/// [`PictureError::Io`] or [`PictureError::Encode`] when the file cannot
/// be written.
///
/// # Example
/// ```
/// use ruda_cli::picture::{Palette, write_maps};
/// let (nlat, nlon) = (4, 8);
/// let f: Vec<f64> = (0..nlat * nlon).map(|i| i as f64 - 16.0).collect();
/// let path = std::env::temp_dir().join("ruda_picture_doc.png");
/// write_maps(&path, nlat, nlon, &[(&f, Palette::diverging_for(&f))])?;
/// let bytes = std::fs::read(&path)?;
/// assert_eq!(&bytes[1..4], b"PNG");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_maps(
    path: &Path,
    nlat: usize,
    nlon: usize,
    fields: &[(&[f64], Palette)],
) -> Result<(), PictureError> {
    let bad = fields.iter().find(|(f, _)| f.len() != nlat * nlon);
    if fields.is_empty() || nlat == 0 || nlon == 0 || bad.is_some() {
        return Err(PictureError::Size {
            nlat,
            nlon,
            got: bad.map_or(0, |(f, _)| f.len()),
        });
    }
    let c = cell(nlon);
    let gap = 4;
    let (w, h) = (fields.len() * nlon * c + (fields.len() - 1) * gap, nlat * c);
    let mut pixels = vec![255u8; w * h * 3];
    for (i, (field, palette)) in fields.iter().enumerate() {
        let x0 = i * (nlon * c + gap);
        for (k, row) in field.chunks(nlon).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let rgb = palette.colour(v);
                for y in k * c..(k + 1) * c {
                    for x in x0 + j * c..x0 + (j + 1) * c {
                        let at = (y * w + x) * 3;
                        pixels[at..at + 3].copy_from_slice(&rgb);
                    }
                }
            }
        }
    }
    let name = path.display().to_string();
    let file = File::create(path).map_err(|source| PictureError::Io {
        path: name.clone(),
        source,
    })?;
    let encode = |source| PictureError::Encode {
        path: name.clone(),
        source,
    };
    let mut enc = png::Encoder::new(BufWriter::new(file), w as u32, h as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(encode)?;
    writer.write_image_data(&pixels).map_err(encode)?;
    writer.finish().map_err(encode)
}

/// One field as a PNG map; see [`write_maps`].
///
/// # Errors
/// As [`write_maps`].
///
/// # Example
/// ```
/// use ruda_cli::picture::{Palette, write_map};
/// let f = vec![1.0; 2 * 4];
/// let path = std::env::temp_dir().join("ruda_picture_one_doc.png");
/// write_map(&path, 2, 4, &f, Palette::sequential_for(&f))?;
/// assert!(write_map(&path, 3, 4, &f, Palette::sequential_for(&f)).is_err());
/// # Ok::<(), ruda_cli::picture::PictureError>(())
/// ```
pub fn write_map(
    path: &Path,
    nlat: usize,
    nlon: usize,
    field: &[f64],
    palette: Palette,
) -> Result<(), PictureError> {
    write_maps(path, nlat, nlon, &[(field, palette)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palettes_reach_their_ends_and_centre() {
        let d = Palette::Diverging { limit: 2.0 };
        assert_eq!(d.colour(-2.0), [5, 48, 97]);
        assert_eq!(d.colour(0.0), [247, 247, 247]);
        assert_eq!(d.colour(5.0), [103, 0, 31]);
        assert_eq!(d.colour(f64::NAN), [0, 0, 0]);
        let s = Palette::sequential_for(&[1.0, 3.0]);
        assert_eq!(s.colour(1.0), [68, 1, 84]);
        assert_eq!(s.colour(3.0), [253, 231, 37]);
    }

    #[test]
    fn maps_decode_to_the_colours_drawn() {
        let (nlat, nlon) = (3, 5);
        let f: Vec<f64> = (0..15).map(|i| i as f64 - 7.0).collect();
        let g = vec![0.0; 15];
        let p = Palette::diverging_for(&f);
        let path = std::env::temp_dir().join(format!("ruda_maps_{}.png", std::process::id()));
        write_maps(&path, nlat, nlon, &[(&f, p), (&g, p)]).unwrap();
        let dec = png::Decoder::new(std::io::BufReader::new(File::open(&path).unwrap()));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        let c = cell(nlon);
        assert_eq!(
            (info.width as usize, info.height as usize),
            (2 * nlon * c + 4, nlat * c)
        );
        let px = |x: usize, y: usize| -> [u8; 3] {
            let at = (y * info.width as usize + x) * 3;
            [buf[at], buf[at + 1], buf[at + 2]]
        };
        // First point (north-west) of the first map, last of it, and the
        // second map's zero.
        assert_eq!(px(0, 0), p.colour(-7.0));
        assert_eq!(px(nlon * c - 1, nlat * c - 1), p.colour(7.0));
        assert_eq!(px(nlon * c + 4, 0), p.colour(0.0));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            write_maps(&path, nlat, nlon, &[]),
            Err(PictureError::Size { .. })
        ));
    }
}
