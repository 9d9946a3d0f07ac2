//! `portico import`: make drafts from a backend's interface (`.proto` files, a descriptor set,
//! reflection) and optionally publish them, or load a whole tree directory
//! (docs/operations/config-tree.md, "The configuration tree").

use crate::args::{Cli, DraftOptions, ImportCommand};
use crate::publish::publish_each;
use crate::table::Table;
use base64::Engine as _;
use portico_registry::client::RegistryClient;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

/// Runs an import command.
pub(crate) async fn import(cli: &Cli, cmd: &ImportCommand) -> Result<ExitCode, String> {
    let c = cli.client()?;
    let (route, options, mut body) = match cmd {
        ImportCommand::Tree { dir, sandbox } => return import_tree(&c, dir, *sandbox).await,
        ImportCommand::Proto {
            options,
            root,
            files,
        } => {
            let mut sources = BTreeMap::new();
            for file in files {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| format!("reading {}: {e}", file.display()))?;
                sources.insert(import_path(root, file)?, text);
            }
            ("/protos", options, json!({ "files": sources }))
        }
        ImportCommand::DescriptorSet { options, file } => {
            let bytes =
                std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
            let set = base64::engine::general_purpose::STANDARD.encode(bytes);
            ("/descriptors", options, json!({ "descriptor_set": set }))
        }
        ImportCommand::Reflection { options, addr } => {
            ("/reflection", options, json!({ "addr": addr }))
        }
    };
    if let Some(obj) = body.as_object_mut() {
        obj.extend(options.json()?);
    }
    let answer = c.post(route, &body).await.map_err(|e| e.to_string())?;
    if options.dry_run {
        println!("preview (nothing written):");
    }
    let ids = print_import(&answer.body);
    if options.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    publish_if_asked(&c, options, ids).await
}

/// With `--publish`, publishes every draft made.
async fn publish_if_asked(
    c: &RegistryClient,
    options: &DraftOptions,
    ids: Vec<String>,
) -> Result<ExitCode, String> {
    if !options.publish {
        return Ok(ExitCode::SUCCESS);
    }
    Ok(publish_each(c, ids, None, None).await)
}

/// Prints an import's result (descriptor, drafts, skipped RPCs, problems); returns the ids of
/// the drafts.
fn print_import(b: &Value) -> Vec<String> {
    println!(
        "descriptor {} ({} bytes)",
        b["descriptor"].as_str().unwrap_or("?"),
        b["descriptor_bytes"]
    );
    let mut ids = Vec::new();
    let mut drafts = Table::new(&[]).indent(2);
    for d in b["drafts"].as_array().into_iter().flatten() {
        let id = d["id"].as_str().unwrap_or("?");
        ids.push(id.to_owned());
        drafts.row(vec![
            format!("draft {id}"),
            d["http"]["method"].as_str().unwrap_or("").to_owned(),
            d["http"]["path"].as_str().unwrap_or("").to_owned(),
            d["rpc"].as_str().unwrap_or("").to_owned(),
            format!("({})", d["state"].as_str().unwrap_or("updated")),
        ]);
        for c in d["conflicts"].as_array().into_iter().flatten() {
            drafts.row(vec![
                "  conflict".to_owned(),
                String::new(),
                c["route"].as_str().unwrap_or("").to_owned(),
                format!(
                    "already bound by API {} ({})",
                    c["api"].as_str().unwrap_or("?"),
                    c["env"].as_str().unwrap_or("?")
                ),
                String::new(),
            ]);
        }
    }
    print!("{}", drafts.render(false));
    for s in b["skipped"].as_array().into_iter().flatten() {
        println!(
            "  skipped {}: {}",
            s["method"].as_str().unwrap_or(""),
            s["reason"].as_str().unwrap_or("")
        );
    }
    for p in b["problems"].as_array().into_iter().flatten() {
        println!(
            "  problem {}: {}",
            p["path"].as_str().unwrap_or(""),
            p["reason"].as_str().unwrap_or("")
        );
    }
    ids
}

/// `portico import tree`: the directory's documents into the live (or sandbox) tree.
async fn import_tree(c: &RegistryClient, dir: &Path, sandbox: bool) -> Result<ExitCode, String> {
    let files = read_tree_files(dir)?;
    if files.is_empty() {
        return Err(format!("{}: no documents found", dir.display()));
    }
    let env = if sandbox { "sandbox" } else { "live" };
    let a = c
        .post(&format!("/import?env={env}"), &json!({ "files": files }))
        .await
        .map_err(|e| e.to_string())?;
    let imported = a.body["imported"].as_array().cloned().unwrap_or_default();
    let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for path in imported.iter().filter_map(Value::as_str) {
        *per_kind
            .entry(path.split('/').next().unwrap_or(path))
            .or_default() += 1;
    }
    let kinds: Vec<String> = per_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "imported {} documents into the {env} tree ({})",
        imported.len(),
        kinds.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// The import path of `file` relative to `root` (with `/` separators).
fn import_path(root: &Path, file: &Path) -> Result<String, String> {
    let root_abs =
        std::fs::canonicalize(root).map_err(|e| format!("--root {}: {e}", root.display()))?;
    let file_abs = std::fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let rel = file_abs.strip_prefix(&root_abs).map_err(|_| {
        format!(
            "{} is not under --root {} (import paths are relative to it)",
            file.display(),
            root.display()
        )
    })?;
    Ok(rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/"))
}

/// The documents of a tree directory, in the export's shape (file path → content).
fn read_tree_files(dir: &Path) -> Result<BTreeMap<String, Value>, String> {
    let mut files = BTreeMap::new();
    let ipacl = dir.join("ipacl.json");
    if ipacl.is_file() {
        let text =
            std::fs::read_to_string(&ipacl).map_err(|e| format!("{}: {e}", ipacl.display()))?;
        files.insert(
            "ipacl.json".to_owned(),
            json!({"encoding": "utf-8", "content": text}),
        );
    }
    for (kind, ext) in TREE_FOLDERS {
        read_folder(&dir.join(kind), kind, ext, &mut files)?;
    }
    Ok(files)
}

/// Every folder of a tree and the extension of its files: all the kinds a tree holds
/// ([`portico_control::DocKind`]; `ipacl.json` is a file), checked by a test below.
pub(crate) const TREE_FOLDERS: [(&str, &str); 7] = [
    ("descriptors", "pb"),
    ("clusters", "json"),
    ("apps", "json"),
    ("topics", "json"),
    ("apis", "json"),
    ("switches", "json"),
    ("alerts", "json"),
];

/// Adds the `*.<ext>` files of `folder` (not hidden ones) as `<kind>/<name>`: `.pb` in base64,
/// the others as UTF-8 text. A missing folder adds nothing.
fn read_folder(
    folder: &Path,
    kind: &str,
    ext: &str,
    files: &mut BTreeMap<String, Value>,
) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry
            .map_err(|e| format!("{}: {e}", folder.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') || !name.ends_with(&format!(".{ext}")) {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let entry = if ext == "pb" {
            json!({"encoding": "base64", "content": base64::engine::general_purpose::STANDARD.encode(bytes)})
        } else {
            let text =
                String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?;
            json!({"encoding": "utf-8", "content": text})
        };
        files.insert(format!("{kind}/{name}"), entry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_directories_read_in_the_export_shape() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("apis")).unwrap();
        std::fs::create_dir_all(d.join("descriptors")).unwrap();
        std::fs::write(d.join("ipacl.json"), "{}").unwrap();
        std::fs::write(d.join("apis/a.json"), r#"{"id":"a"}"#).unwrap();
        std::fs::write(d.join("apis/.hidden.json"), "{}").unwrap();
        std::fs::write(d.join("apis/notes.txt"), "x").unwrap();
        std::fs::write(d.join("descriptors/ab.pb"), [0u8, 1]).unwrap();
        let files = read_tree_files(d).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["apis/a.json", "descriptors/ab.pb", "ipacl.json"]
        );
        assert_eq!(files["apis/a.json"]["content"], r#"{"id":"a"}"#);
        assert_eq!(files["descriptors/ab.pb"]["encoding"], "base64");
        assert_eq!(files["descriptors/ab.pb"]["content"], "AAE=");
    }

    #[test]
    fn every_kind_of_the_tree_is_read() {
        use portico_control::DocKind;
        let kinds = [
            DocKind::Api,
            DocKind::Cluster,
            DocKind::App,
            DocKind::Switch,
            DocKind::IpAcl,
            DocKind::Descriptor,
            DocKind::Alert,
            DocKind::Topic,
        ];
        for kind in kinds {
            // A new kind must be added here, and to TREE_FOLDERS.
            match kind {
                DocKind::Api
                | DocKind::Cluster
                | DocKind::App
                | DocKind::Switch
                | DocKind::IpAcl
                | DocKind::Descriptor
                | DocKind::Alert
                | DocKind::Topic => {}
            }
            if kind == DocKind::IpAcl {
                continue;
            }
            assert!(
                TREE_FOLDERS.iter().any(|(dir, _)| *dir == kind.dir()),
                "{} is not read by `portico import tree`",
                kind.dir()
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (folder, ext) in TREE_FOLDERS {
            std::fs::create_dir_all(d.join(folder)).unwrap();
            std::fs::write(d.join(format!("{folder}/x.{ext}")), "{}").unwrap();
        }
        let files = read_tree_files(d).unwrap();
        assert_eq!(files.len(), TREE_FOLDERS.len());
        assert!(files.contains_key("topics/x.json") && files.contains_key("alerts/x.json"));
    }

    #[test]
    fn import_paths_are_relative_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("demo")).unwrap();
        let file = dir.path().join("demo/order.proto");
        std::fs::write(&file, "").unwrap();
        assert_eq!(import_path(dir.path(), &file).unwrap(), "demo/order.proto");
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(import_path(elsewhere.path(), &file).is_err());
    }
}
