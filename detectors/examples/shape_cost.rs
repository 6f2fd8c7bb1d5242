//! `make bench`'s instruction counts of the shape fingerprint next to serde_json parsing the same `&str` to
//! `IgnoredAny` (`scripts/shape-instructions.sh` runs this under callgrind): deterministic, where the
//! timings of criterion's `shape/*` vary by ±10 % on a shared machine.
//!
//! usage: shape_cost fingerprint|serde SIZE ITERATIONS   (SIZE: 1KiB, 8KiB or 1MiB)

use std::hint::black_box;

#[path = "../benches/shape_input.rs"]
mod shape_input;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(which), Some(size), Some(iterations)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: shape_cost fingerprint|serde 1KiB|8KiB|1MiB ITERATIONS");
        std::process::exit(2);
    };
    let bytes = match size.as_str() {
        "1KiB" => 1024,
        "8KiB" => 8 * 1024,
        "1MiB" => 1024 * 1024,
        _ => {
            eprintln!("size must be 1KiB, 8KiB or 1MiB");
            std::process::exit(2);
        }
    };
    let Ok(iterations) = iterations.parse::<u64>() else {
        eprintln!("ITERATIONS must be a number");
        std::process::exit(2);
    };
    let Ok(input) = String::from_utf8(shape_input::return_value(bytes)) else { std::process::exit(2) };
    let started = std::time::Instant::now();
    for _ in 0..iterations {
        match which.as_str() {
            "fingerprint" => {
                black_box(driftline_detectors::shape::fingerprint_str(
                    black_box(&input),
                    driftline_detectors::shape::LARGEST_MAX_BYTES,
                ));
            }
            _ => {
                black_box(serde_json::from_str::<serde::de::IgnoredAny>(black_box(&input)).is_ok());
            }
        }
    }
    if iterations > 0 {
        // Wall time too, for comparing builds side by side (the instruction counts are the figure).
        eprintln!(
            "{which} {size}: {:.1} ns per value",
            started.elapsed().as_nanos() as f64 / iterations as f64
        );
    }
}
