//! Secrets read from files (ZooKeeper credentials, the Redis password, the notification key):
//! one rule for all of them (docs/SECURITY.md): a file that group or others may read is
//! refused, as ssh refuses such keys, and so is an empty one.

use std::path::Path;

/// Reads a secret from `path`: its text without surrounding whitespace, refusing a file that
/// group or others may read and an empty one. The error names the file and what to do.
pub fn read(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "{shown} is readable by others (mode {mode:04o}): run `chmod 600 {shown}`"
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("{shown} is empty"));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_private_non_empty_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "  s3cr3t \n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(read(&path).unwrap_err().contains("readable by others"));
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert_eq!(read(&path).unwrap(), "s3cr3t");
        std::fs::write(&path, "\n").unwrap();
        assert!(read(&path).unwrap_err().ends_with("is empty"));
        assert!(read(&dir.path().join("none")).is_err());
    }
}
