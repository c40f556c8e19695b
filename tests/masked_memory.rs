//! No masked or vector-addressed memory access in the built library's private-key code.
//! - An AVX-512 load or store under a mask register (`vmovdqa64 (mem), zmm{k}`) may skip the
//!   memory of the lanes its mask clears: AMD's manual leaves that to the implementation. In a
//!   table scan whose mask comes from a secret window digit, which cache lines are read would
//!   then follow the digit. LLVM makes such loads by itself from a load followed by a masked
//!   blend (it did in the IFMA RSA kernel's table scan and final subtraction, at opt-level 1
//!   and 3).
//! - A gather or scatter reads or writes the addresses its lanes hold: how a vector scan would
//!   index memory with a secret.
//!
//! So the check is on the machine code the tests load, not on the source.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

/// Functions that handle only public data (their module says so) and may use masked memory
/// operands: the horizontal IFMA kernel runs the public-key check of a signature.
const PUBLIC_ONLY: &[&str] = &["ferrohsm::engine::kernel::ifma::horizontal::"];

/// Instructions with a memory operand and a mask register, and gathers and scatters (memory
/// addressed by a vector's lanes), by demangled function name.
fn masked_memory_operands(disassembly: &str) -> BTreeMap<String, Vec<String>> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut function = String::new();
    for line in disassembly.lines() {
        // "0000000000215540 <ferrohsm::engine::...>:"
        if let Some(name) = line
            .strip_suffix(">:")
            .and_then(|l| l.split_once(" <"))
            .map(|(_, n)| n)
        {
            function = name.to_string();
            continue;
        }
        let masked = (1..8).any(|k| line.contains(&format!("{{%k{k}}}")));
        // "  4000:\tvpgatherqq 0x0(,%zmm1,8),%zmm0{%k1}": the mnemonic follows the tab.
        let mnemonic = line
            .split('\t')
            .nth(1)
            .and_then(|i| i.split_whitespace().next())
            .unwrap_or("");
        let vector_addressed = ["vpgather", "vgather", "vpscatter", "vscatter"]
            .iter()
            .any(|g| mnemonic.starts_with(g));
        if (masked && line.contains('(')) || vector_addressed {
            found
                .entry(function.clone())
                .or_default()
                .push(line.trim().to_string());
        }
    }
    found
}

#[test]
fn private_key_code_has_no_masked_memory_access() {
    let so = common::module_path();
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-C"])
        .arg(&so)
        .output()
        .expect("objdump runs (binutils)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);

    // The scan this guards is in the disassembly, with its masked moves between registers:
    // otherwise the search below would pass on nothing.
    let kernels: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with(">:") && l.contains("ifma::vertical::avx512::modexp_kernel"))
        .collect();
    assert!(
        !kernels.is_empty(),
        "the IFMA modexp kernels are missing from {}",
        so.display()
    );
    assert!(
        text.lines().any(|l| l.contains("{%k") && !l.contains('(')),
        "no masked register move in {}: the disassembly is not what this test reads",
        so.display()
    );

    let offending: Vec<String> = masked_memory_operands(&text)
        .into_iter()
        .filter(|(f, _)| !PUBLIC_ONLY.iter().any(|p| f.starts_with(p)))
        .map(|(f, lines)| format!("{f}: {} instruction(s), first `{}`", lines.len(), lines[0]))
        .collect();
    assert!(
        offending.is_empty(),
        "masked or vector-addressed memory operands in private-key code (keep blend operands in \
         registers, as ifma::vertical's in_register! does; index tables by scanning, not gathers):\n{}",
        offending.join("\n")
    );
}

/// The parser finds masked loads and stores, gathers (AVX2's unmasked form too), and ignores
/// masked register moves, plain memory operands and calls to functions named like gathers.
#[test]
fn the_search_finds_masked_loads_and_stores() {
    let sample = "\
0000000000001000 <secret::scan>:
  1000:\tvmovdqa64 0xa00(%rsp),%zmm0{%k1}
  1008:\tvmovdqa64 %zmm1,%zmm0{%k2}
  1010:\tvmovdqa64 (%rdi),%zmm3
0000000000002000 <secret::store>:
  2000:\tvmovdqu64 %zmm0,0x40(%rsp){%k7}
0000000000003000 <plain>:
  3000:\tvpaddq (%rsi),%zmm1,%zmm2
  3006:\tcall   1234 <foo::gather_rows>
0000000000004000 <secret::gather>:
  4000:\tvpgatherqq 0x0(,%zmm1,8),%zmm0{%k1}
  4008:\tvpgatherdd (%rax,%ymm1,4),%ymm0,%ymm2
";
    let found = masked_memory_operands(sample);
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(found["secret::gather"].len(), 2);
    assert_eq!(found["secret::scan"].len(), 1);
    assert!(found["secret::scan"][0].contains("0xa00(%rsp)"));
    assert_eq!(found["secret::store"].len(), 1);
}
