//! A model split into 4 pipeline stages (one rank each), trained with the
//! 1F1B schedule on 8 micro-batches per step, activations and gradients
//! moving through `ruda_tensor::Exchange`; the same model trained serially
//! alongside, and the two compared bit for bit.
//!
//! `cargo run --release -p ruda-tensor --example pipeline_1f1b`

#[path = "pipeline_model/mod.rs"]
mod pipeline_model;

fn main() -> Result<(), String> {
    let (stages, micro, rows, steps) = (4, 8, 3, 5);
    let piped = pipeline_model::train_pipeline(stages, micro, rows, steps)?;
    let serial = pipeline_model::train_serial(stages, micro, rows, steps);
    for (step, (p, s)) in piped.losses.iter().zip(&serial.losses).enumerate() {
        println!("step {step}: pipeline loss {p:.12}, serial {s:.12}");
    }
    if piped != serial {
        return Err("the pipeline differs from the serial run".into());
    }
    println!(
        "{stages} stages × {micro} micro-batches (1F1B): equal to the serial run, bit for bit"
    );
    Ok(())
}
