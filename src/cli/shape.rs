//! `driftline shape`: the shape of a JSON value, as ingest computes it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use driftline_detectors::shape::fingerprint;
use driftline_schemas::DetectorThresholds;
use serde::Serialize;

use super::{read_input, Format, EXIT_OK};

#[derive(Debug, Args)]
pub struct ShapeArgs {
    /// JSON file holding the return value; `-` or nothing reads stdin.
    file: Option<PathBuf>,
    /// Values whose compact JSON is longer than this many bytes are `oversized` (1..=1048576).
    #[arg(long, default_value_t = 8192)]
    max_bytes: u64,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Serialize)]
struct ShapeOutput {
    outcome: &'static str,
    shape: Option<String>,
    hash: Option<String>,
    hex8: Option<String>,
    compact_bytes: Option<u64>,
}

pub fn run(args: ShapeArgs) -> anyhow::Result<ExitCode> {
    let (min, max) = DetectorThresholds::MAX_BYTES;
    if !(u64::from(min)..=u64::from(max)).contains(&args.max_bytes) {
        bail!("--max-bytes = {} is out of bounds: it must be in [{min}, {max}]", args.max_bytes);
    }
    let input = read_input(args.file.as_deref())?;
    let print = fingerprint(&input, args.max_bytes);
    let output = ShapeOutput {
        outcome: print.outcome.as_str(),
        hash: print.hash(),
        hex8: print.hex8(),
        shape: print.shape,
        compact_bytes: print.compact_bytes,
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string(&output)?),
        Format::Text => {
            let none = || "-".to_owned();
            println!("outcome        {}", output.outcome);
            println!("shape          {}", output.shape.unwrap_or_else(none));
            println!("hash           {}", output.hash.unwrap_or_else(none));
            println!("hex8           {}", output.hex8.unwrap_or_else(none));
            println!("compact bytes  {}", output.compact_bytes.map_or_else(none, |b| b.to_string()));
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
