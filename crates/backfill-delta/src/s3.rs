//! `s3://bucket/prefix`: tables on S3 and S3-compatible object storage
//! (MinIO, Ceph, Cloudflare R2, …).
//!
//! delta-rs reaches S3 through its `deltalake-aws` crate, which brings the
//! AWS SDK and a DynamoDB lock for stores that cannot write conditionally.
//! S3 has written conditionally since 2024 (`If-None-Match: *`, atomic:
//! of two writers putting the same object, one gets `412 Precondition
//! Failed`), which is all a Delta commit needs: version `N`'s log file is put
//! only if it is absent, so of two writers committing version `N` one wins
//! and the other is told it lost. This module registers, for `s3://` and
//! `s3a://`, `object_store`'s own S3 client (already in delta-rs's tree)
//! with conditional puts on, and delta-rs's default log store, which commits
//! by exactly that put.

use std::str::FromStr;
use std::sync::{Arc, Once};

use deltalake::logstore::{
    default_logstore, logstore_factories, object_store_factories, LogStore, LogStoreFactory,
    ObjectStoreFactory, ObjectStoreRef, StorageConfig,
};
use deltalake::{DeltaResult, DeltaTableError, Path};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use url::Url;

/// The schemes this module serves.
const SCHEMES: [&str; 2] = ["s3://", "s3a://"];

/// Registers the S3 schemes with delta-rs, once per process.
pub(crate) fn register() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        for scheme in SCHEMES {
            let url = Url::parse(scheme).expect("a scheme is a URL");
            object_store_factories().insert(url.clone(), Arc::new(S3));
            logstore_factories().insert(url, Arc::new(S3));
        }
    });
}

/// The factory of S3 stores and their log stores.
struct S3;

impl ObjectStoreFactory for S3 {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, Path)> {
        // The usual AWS environment (AWS_ACCESS_KEY_ID, AWS_REGION,
        // AWS_ENDPOINT_URL, …), then the options given, then the URL.
        let mut builder = AmazonS3Builder::from_env();
        for (key, value) in &config.raw {
            let parsed = AmazonS3ConfigKey::from_str(&key.to_ascii_lowercase()).map_err(|_| {
                DeltaTableError::Generic(format!("unknown S3 storage option {key:?}"))
            })?;
            builder = builder.with_config(parsed, value);
        }
        let store = builder
            .with_url(url.as_str())
            // Commits rest on it, whatever the environment says.
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .build()?;
        let path = Path::from_url_path(url.path())?;
        Ok((Arc::new(store), path))
    }
}

impl LogStoreFactory for S3 {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}
