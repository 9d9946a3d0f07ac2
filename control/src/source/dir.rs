//! The directory source. (Being written.)

/// Reads a §3.3 directory tree (`--config-dir`).
pub struct DirSource {
    pub root: std::path::PathBuf,
}

#[async_trait::async_trait]
impl super::ConfigSource for DirSource {
    fn describe(&self) -> String {
        format!("dir:{}", self.root.display())
    }
    async fn run(&self, _updates: tokio::sync::mpsc::Sender<crate::Tree>) {}
}
