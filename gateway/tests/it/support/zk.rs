//! Configuration written straight into ZooKeeper (an open tree), as the registry would.

use serde_json::Value;
use std::time::Duration;
use zookeeper_client as zk;

/// Creates or replaces the documents `docs` (paths relative to `root`, such as
/// `apis/ping.get`) through `hosts`, creating `root` and its kind folders first.
pub fn put(hosts: &str, root: &str, docs: &[(&str, Value)]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(hosts)
            .await
            .unwrap();
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        for dir in ["", "/apis", "/apps", "/clusters", "/switches"] {
            let _ = client.create(&format!("{root}{dir}"), &[], &open).await;
        }
        for (rel, doc) in docs {
            let path = format!("{root}/{rel}");
            let data = serde_json::to_vec(doc).unwrap();
            match client.create(&path, &data, &open).await {
                Ok(_) => {}
                Err(zk::Error::NodeExists) => {
                    client.set_data(&path, &data, None).await.unwrap();
                }
                Err(e) => panic!("create {path}: {e}"),
            }
        }
    });
}
