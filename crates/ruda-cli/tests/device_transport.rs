//! The device transport from the outside: the demo trained on a
//! `DeviceWorld` (tensors kept on their shared Flex device) against the
//! same demo on the local transport, and `ruda bench --transport device`.

use std::process::Command;

use ruda_cli::demo::{DemoConfig, DemoTransport, StepRecord, TOLERANCE, compare, train_on};

fn ruda(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ruda"))
        .args(args)
        .output()
        .expect("run ruda")
}

/// 17 × 32 (latitudes uneven over 2 and 4 ranks), 2 channels.
fn small(steps: usize) -> DemoConfig {
    DemoConfig {
        steps,
        nlat: 17,
        nlon: 32,
        channels: 2,
        ..DemoConfig::default()
    }
}

/// Every loss and gradient of a run as bits.
fn bits(records: &[StepRecord]) -> Vec<Vec<u64>> {
    records
        .iter()
        .map(|r| {
            std::iter::once(r.loss.to_bits())
                .chain(r.grads.iter().map(|g| g.to_bits()))
                .collect()
        })
        .collect()
}

#[test]
fn the_demo_on_the_device_world_equals_the_host_staged_run_bit_for_bit() {
    let cfg = small(3);
    let bar = indicatif::ProgressBar::hidden();
    for (polar, azimuth) in [(2, 2), (3, 1), (1, 2)] {
        let host = train_on(&cfg, polar, azimuth, DemoTransport::Threads, &bar).unwrap();
        let device = train_on(&cfg, polar, azimuth, DemoTransport::Device, &bar).unwrap();
        assert_eq!(
            bits(&device.records),
            bits(&host.records),
            "{polar}x{azimuth}: the device-resident run must equal the host-staged one bit for bit"
        );
        let serial = train_on(&cfg, 1, 1, DemoTransport::Device, &bar).unwrap();
        let v = compare(&device.records, &serial.records, TOLERANCE);
        assert!(v.agree, "{polar}x{azimuth}: worst {}", v.worst);
        assert!(device.records[2].loss < device.records[0].loss);
    }
}

#[test]
fn demo_command_on_the_device_transport() {
    let out = ruda(&[
        "demo",
        "--job",
        "synthetic",
        "--transport",
        "device",
        "--grid",
        "2x2",
        "--steps",
        "2",
        "--nlat",
        "17",
        "--nlon",
        "32",
        "--channels",
        "2",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("verdict: OK"), "{text}");
    assert!(text.contains("sharing one Flex device"), "{text}");
}

#[test]
fn bench_on_the_device_transport_reports_three_paths_per_row() {
    let out = ruda(&[
        "bench",
        "--transport",
        "device",
        "--op",
        "all",
        "--sizes",
        "4K:8K",
        "--ranks",
        "3",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc["transport"], "device");
    assert_eq!(doc["device"], "flex");
    assert_eq!(doc["ranks"], 3);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        2 * 5 * 3,
        "three rows per size and op (all-to-all-v is all-to-all on tensors)"
    );
    for chunk in rows.chunks(3) {
        let kinds: Vec<&str> = chunk.iter().map(|r| r["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["device", "tensor", "collective"]);
        for r in chunk {
            assert_eq!(r["op"], chunk[0]["op"]);
            assert_eq!(r["bytes"], chunk[0]["bytes"]);
            assert_eq!(r["wrong"], 0, "{r}");
            let t = r["time_us"].as_f64().unwrap();
            assert!(t > 0.0 && t.is_finite(), "{r}");
            // Issue 17 (5): the device broadcast on one shared device hands
            // over the root's tensor; its row claims no bandwidth.
            let no_copy = r["kind"] == "device" && r["op"] == "broadcast";
            assert_eq!(r["moves_data"], !no_copy, "{r}");
            if no_copy {
                assert!(r["busbw"].is_null() && r["roofline_pct"].is_null(), "{r}");
            } else {
                assert!(r["busbw"].as_f64().unwrap() > 0.0, "{r}");
            }
        }
        // The device row's roofline is the device's own copy rate.
        assert!(chunk[0]["stream_gbps"].as_f64().unwrap() > 0.0);
    }
    // The table form names the three paths and the ratios.
    let out = ruda(&[
        "bench",
        "--transport",
        "device",
        "--op",
        "all-reduce",
        "--sizes",
        "4K",
        "--iters",
        "2",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("dev/host") && text.contains("dev/local") && text.contains("OK"),
        "{text}"
    );
}

#[test]
fn device_transport_argument_errors_exit_2() {
    let mut cases = vec![
        (
            vec!["bench", "--transport", "device", "--tensor"],
            "already times the host-staged",
        ),
        (
            vec!["bench", "--transport", "device", "--dtype", "i32"],
            "floating element type",
        ),
        (vec!["demo", "--transport", "nccl"], "device"),
        (vec!["bench", "--device", "flex"], "--transport device"),
    ];
    if !cfg!(feature = "wgpu") {
        cases.push((
            vec!["bench", "--transport", "device", "--device", "wgpu"],
            "built without it",
        ));
    }
    for (args, needle) in cases {
        let out = ruda(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// `--device wgpu` (lavapipe in CI): the three paths on the wgpu device,
/// every value checked.
#[cfg(feature = "wgpu")]
#[test]
fn bench_on_a_wgpu_device() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ruda"));
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let out = cmd
        .args([
            "bench",
            "--transport",
            "device",
            "--device",
            "wgpu",
            "--op",
            "all",
            "--sizes",
            "4K",
            "--ranks",
            "2",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--json",
        ])
        .output()
        .expect("run ruda");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc["device"], "wgpu");
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5 * 3, "all-to-all-v is all-to-all on tensors");
    for r in rows {
        assert_eq!(r["wrong"], 0, "{r}");
        assert!(r["time_us"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// The demo on wgpu (lavapipe in CI): ranks device-resident on the wgpu
/// device, the transforms' steps running there as tensor operations,
/// against the host-staged run on Flex (the host kernels); and the command,
/// whose serial model runs on wgpu too, compared with its distributed one.
/// Small (lavapipe compiles every kernel once per process, slowly).
#[cfg(feature = "wgpu")]
#[test]
fn the_demo_on_wgpu_equals_the_run_on_flex() {
    let cfg = DemoConfig {
        steps: 2,
        nlat: 9,
        nlon: 16,
        channels: 1,
        ..DemoConfig::default()
    };
    let device = DemoTransport::Wgpu.device().expect("lavapipe has f64");
    assert!(
        !format!("{device:?}").contains("Flex"),
        "the wgpu transport's device is not Flex: {device:?}"
    );
    let bar = indicatif::ProgressBar::hidden();
    let host = train_on(&cfg, 2, 2, DemoTransport::Threads, &bar).unwrap();
    let wgpu = train_on(&cfg, 2, 2, DemoTransport::Wgpu, &bar).unwrap();
    let v = compare(&wgpu.records, &host.records, TOLERANCE);
    assert!(v.agree, "2x2 on wgpu vs Flex: worst {}", v.worst);
    assert!(wgpu.records[1].loss < wgpu.records[0].loss);

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ruda"));
    cmd.args([
        "demo",
        "--job",
        "synthetic",
        "--transport",
        "wgpu",
        "--grid",
        "2x1",
        "--steps",
        "1",
        "--nlat",
        "9",
        "--nlon",
        "16",
        "--channels",
        "1",
    ]);
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let out = cmd.output().expect("run ruda");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("verdict: OK"), "{text}");
    assert!(text.contains("sharing one wgpu device"), "{text}");
}

/// Without feature `wgpu`, asking for it is a usage error that says how to
/// get it, before anything is printed.
#[cfg(not(feature = "wgpu"))]
#[test]
fn the_demo_on_wgpu_without_the_feature_says_how_to_build_it() {
    let out = ruda(&[
        "demo",
        "--job",
        "synthetic",
        "--transport",
        "wgpu",
        "--steps",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features wgpu"), "{err}");
}
