//! Races between processes: children (this test binary again, in a role) print READY once
//! set up and start when the parent writes a line to their standard input, so that every
//! child is loaded before any begins.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout};

/// Reads `out` until a line holding `marker`; the rest of that line.
pub fn read_until(out: &mut impl BufRead, marker: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "ended before {marker}: {seen}"
        );
        // The test harness may print its own words before ours on the line.
        if let Some((_, rest)) = line.split_once(marker) {
            return rest.trim().to_string();
        }
        seen.push_str(&line);
    }
}

/// Waits for every child's READY, then starts them all; their outputs, to read what follows.
pub fn start_together(children: &mut [Child]) -> Vec<BufReader<ChildStdout>> {
    let mut outs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()))
        .collect();
    for o in &mut outs {
        read_until(o, "READY");
    }
    for c in children.iter_mut() {
        writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
    }
    outs
}
