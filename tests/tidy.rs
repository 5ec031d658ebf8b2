//! Checks on the layout of the source tree itself, so the architecture stays as ARCHITECTURE.md
//! describes it: no import cycle between the top-level modules of `src/`, no source file over
//! 1,000 lines, the storage engine named only inside `store/`, and the pure core free of the
//! async runtime, the store and the wire types.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable source dir") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file belongs to (`src/state/tickets.rs` → `state`); `None` for the
/// crate roots.
fn top_module(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// The code of a file without its comments (line comments and doc comments), so a module named
/// in prose does not count as an import.
fn code(path: &Path) -> String {
    strip_comments(&std::fs::read_to_string(path).expect("readable source file"))
}

fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names through `crate::`, including each name in a
/// `crate::{a, b::c}` group.
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first path segment of each name at depth 0 of the group.
            let mut depth = 0;
            let mut current = String::new();
            let mut collecting = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(std::mem::take(&mut current));
                        collecting = true;
                    }
                    ':' if depth == 0 => collecting = false,
                    c if depth == 0 && collecting && (c.is_alphanumeric() || c == '_') => {
                        current.push(c);
                    }
                    _ => {}
                }
            }
            names.insert(current);
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.insert(ident);
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// Top-level module → the top-level modules it imports.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(&src());
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = top_module(file) else {
            continue;
        };
        let deps = graph.entry(from.clone()).or_default();
        for to in crate_references(&code(file)) {
            if to != from && modules.contains(&to) {
                deps.insert(to);
            }
        }
    }
    graph
}

/// A cycle through `start` if there is one, as the path of modules.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn the_reference_scanner_reads_paths_and_groups() {
    let refs = crate_references(&strip_comments(
        "use crate::ids::PlayerId;\nuse crate::{records::PoolRecord, rejection};\n\
         // crate::commented\nlet x = crate::math::percentile(&v, 0.5);",
    ));
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        ["ids", "math", "records", "rejection"]
    );
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        cycle_from(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let graph = module_graph();
    assert!(graph.len() > 10, "the scan found the modules: {graph:?}");
    let cycles: Vec<Vec<String>> = graph.keys().filter_map(|m| cycle_from(&graph, m)).collect();
    assert!(cycles.is_empty(), "import cycles: {cycles:?}");
}

#[test]
fn the_pure_core_imports_no_shell_module() {
    let graph = module_graph();
    let shell = [
        "api",
        "server",
        "state",
        "store",
        "matchmaker",
        "ledger",
        "tools",
        "sim",
        "config",
    ];
    for core in [
        "rating",
        "ranking",
        "matching",
        "results",
        "records",
        "rejection",
    ] {
        let bad: Vec<&String> = graph[core]
            .iter()
            .filter(|m| shell.contains(&m.as_str()))
            .collect();
        assert!(bad.is_empty(), "{core} imports {bad:?}");
    }
}

#[test]
fn the_pure_core_uses_no_runtime_store_or_wire_types() {
    for dir in ["rating", "ranking", "matching", "results"] {
        for file in rust_files(&src().join(dir)) {
            let code = code(&file);
            for forbidden in ["tokio::", "tonic::", "sled::", "metrics::", "prost::"] {
                assert!(
                    !code.contains(forbidden),
                    "{} uses {forbidden}",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn only_the_store_names_the_storage_engine() {
    for file in rust_files(&src()) {
        if file.starts_with(src().join("store")) {
            continue;
        }
        assert!(
            !code(&file).contains("sled::"),
            "{} names sled; go through store::Storage",
            file.display()
        );
    }
}

#[test]
fn no_source_file_is_over_a_thousand_lines() {
    let long: Vec<(String, usize)> = rust_files(&src())
        .into_iter()
        .map(|f| {
            let lines = std::fs::read_to_string(&f)
                .expect("readable source file")
                .lines()
                .count();
            (f.display().to_string(), lines)
        })
        .filter(|(_, lines)| *lines > 1000)
        .collect();
    assert!(long.is_empty(), "split these by concern: {long:?}");
}
