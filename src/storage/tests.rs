//! Unit tests of `storage`.

use super::{configure, options_for, IoClass, StorageOptions};
use std::io::{Error, ErrorKind};
use std::path::Path;

#[test]
fn each_connector_reads_its_table_with_its_own_settings() {
    let opts = |region: &str| StorageOptions {
        s3_region: Some(region.into()),
        ..Default::default()
    };
    configure(Some(Path::new("s3://lake/orders")), &opts("a"));
    configure(Some(Path::new("s3://lake/orders_v2/")), &opts("b"));
    assert_eq!(options_for("s3://lake/orders/p=1/f.parquet").unwrap(), opts("a"));
    assert_eq!(
        options_for("s3://lake/orders_v2/f.parquet").unwrap(),
        opts("b"),
        "a root is a whole path segment"
    );
    let err = options_for("s3://other/f.parquet").unwrap_err().to_string();
    assert!(err.contains("separate processes"), "{err}");
}

#[test]
fn storage_errors_are_classed_by_kind_and_by_the_object_store_text() {
    let cases = [
        (Error::from(ErrorKind::NotFound), IoClass::NotFound),
        (Error::from(ErrorKind::PermissionDenied), IoClass::PermissionDenied),
        (Error::from(ErrorKind::UnexpectedEof), IoClass::Corrupt),
        (Error::from(ErrorKind::ConnectionRefused), IoClass::Unreachable),
        (Error::other("Generic S3 error: Error performing GET http://s3/b/k in 3.1s, after 10 retries, max_retries: 10, \
                       retry_timeout: 180s - Server returned non-2xx status code: 503 Service Unavailable: <Code>SlowDown</Code>"),
         IoClass::Throttled),
        (Error::other("Generic S3 error: Error after 10 retries in 180s: error sending request for url (http://s3/b/k)"),
         IoClass::Unreachable),
        (Error::other("Generic S3 error: something else"), IoClass::Other),
    ];
    for (e, want) in cases {
        assert_eq!(IoClass::of(&e), want, "{e}");
    }
    assert!(IoClass::Throttled.is_transient() && IoClass::Unreachable.is_transient());
    assert!(
        !IoClass::NotFound.is_transient()
            && !IoClass::PermissionDenied.is_transient()
            && !IoClass::Corrupt.is_transient()
    );
}
