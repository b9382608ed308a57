//! The README, BENCHMARKS.md, CHANGELOG.md and the guide (`book/src`)
//! link only to what exists: every relative link (and every link into
//! this repository on GitHub) names a file or directory of the checkout,
//! every `#anchor` a heading of its file, and every chapter is in the
//! guide's `SUMMARY.md`. (Their Rust blocks are compiled as doc tests of
//! this crate: `saga_cli::guide`.)

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Links into this repository as GitHub shows it, checked as local paths.
const REPOSITORY: [&str; 2] = [
    "https://github.com/saga-rs/saga/blob/main/",
    "https://github.com/saga-rs/saga/tree/main/",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The documents checked: the root's and every chapter of the guide.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "CHANGELOG.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    files.extend(chapters(&root.join("book/src")));
    files.push(root.join("book/src/SUMMARY.md"));
    files
}

/// The guide's chapters: every `.md` of `book/src` but `SUMMARY.md`.
fn chapters(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .filter(|path| !path.ends_with("SUMMARY.md"))
        .collect();
    found.sort();
    found
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// `line` without its inline code spans (`` `[a](b)` `` is no link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// The targets of the Markdown links and images of `text`: `](target)`.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    found
}

/// The anchors of `text`'s headings, as mdBook and GitHub make them:
/// lower case, spaces to `-`, other punctuation but `-` and `_` dropped.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| {
            line.trim_start_matches('#')
                .trim()
                .chars()
                .filter_map(|c| match c {
                    c if c.is_alphanumeric() || c == '_' || c == '-' => {
                        Some(c.to_lowercase().next().unwrap_or(c))
                    }
                    c if c.is_whitespace() => Some('-'),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// `path` with its `..` and `.` resolved, without touching the disk.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the link `target` of the document `from`, if anything.
fn broken(from: &Path, target: &str) -> Option<String> {
    let local = match REPOSITORY.iter().find_map(|r| target.strip_prefix(r)) {
        Some(path) => format!("{}/{path}", root().display()),
        None if target.contains("://") || target.starts_with("mailto:") => return None,
        None => target.to_owned(),
    };
    let (path, anchor) = match local.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (local.as_str(), None),
    };
    let file = if path.is_empty() {
        from.to_path_buf()
    } else if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        normal(&from.parent().unwrap().join(path))
    };
    if !file.exists() {
        return Some(format!("{target}: no {}", file.display()));
    }
    let anchor = anchor?;
    if file.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "{target}: an anchor into a file that is not Markdown"
        ));
    }
    let text = fs::read_to_string(&file).unwrap();
    if anchors(&text).contains(anchor) {
        None
    } else {
        Some(format!(
            "{target}: {} has no heading #{anchor}",
            file.display()
        ))
    }
}

#[test]
fn every_link_of_the_readme_and_the_guide_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text =
            fs::read_to_string(&document).unwrap_or_else(|e| panic!("{}: {e}", document.display()));
        for target in links(&text) {
            checked += 1;
            if let Some(problem) = broken(&document, &target) {
                problems.push(format!("{}: {problem}", document.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
}

#[test]
fn every_chapter_is_in_the_summary() {
    let src = root().join("book/src");
    let summary = fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let missing: Vec<String> = chapters(&src)
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| !listed.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "chapters not in SUMMARY.md: {missing:?}"
    );
}

#[test]
fn the_readme_stays_short() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: move the rest to the guide (book/src)"
    );
}

/// The checker itself: anchors as mdBook makes them, links outside code.
#[test]
fn anchors_and_links_are_read_as_mdbook_reads_them() {
    let text =
        "# Top\n## `saga check --replay`\n```sh\n# not a heading\n```\n## Rollback, in short\n";
    let found = anchors(text);
    assert!(found.contains("saga-check---replay"), "{found:?}");
    assert!(found.contains("rollback-in-short"), "{found:?}");
    assert!(!found.contains("not-a-heading"), "{found:?}");
    let text = "see [a](a.md#x) and `[b](b.md)`\n```rust\n[c](c.md)\n```\n![i](img.png)";
    assert_eq!(links(text), ["a.md#x", "img.png"]);
}
