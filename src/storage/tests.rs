//! Unit tests of `storage`.

use super::{IoClass, Storage, StorageOptions};
use std::io::{Error, ErrorKind};
use std::path::Path;
use std::sync::Arc;

#[test]
fn each_connector_reads_with_its_own_settings_and_clients() {
    let opts = |region: &str| StorageOptions {
        s3_region: Some(region.into()),
        s3_endpoint: Some("http://127.0.0.1:9".into()),
        s3_allow_http: true,
        ..Default::default()
    };
    let (a, b) = (Storage::new(opts("a")), Storage::new(opts("b")));
    let orders = Path::new("s3://lake/orders/f.parquet");
    let (a1, _) = a.store(orders).unwrap();
    let (a2, key) = a.store(Path::new("s3://lake/orders_v2/g.parquet")).unwrap();
    let (b1, _) = b.store(orders).unwrap();
    assert!(Arc::ptr_eq(&a1, &a2), "one client per bucket for a connector");
    assert!(
        !Arc::ptr_eq(&a1, &b1),
        "another connector's settings get a client of their own"
    );
    assert_eq!(key.as_ref(), "orders_v2/g.parquet");
    let (a3, _) = a.clone().store(orders).unwrap();
    assert!(Arc::ptr_eq(&a1, &a3), "a clone of the handle shares its clients");
}

#[test]
fn storage_errors_are_classed_by_kind_and_by_the_object_store_types() {
    use object_store::client::{HttpError, HttpErrorKind};
    let cases = [
        (Error::from(ErrorKind::NotFound), IoClass::NotFound),
        (Error::from(ErrorKind::PermissionDenied), IoClass::PermissionDenied),
        (Error::from(ErrorKind::UnexpectedEof), IoClass::Corrupt),
        (Error::from(ErrorKind::ConnectionRefused), IoClass::Unreachable),
        (Error::from(ErrorKind::ResourceBusy), IoClass::Throttled),
        // text decides nothing
        (
            Error::other("503 Service Unavailable: <Code>SlowDown</Code> connection refused"),
            IoClass::Other,
        ),
    ];
    for (e, want) in cases {
        assert_eq!(IoClass::of(&e), want, "{e}");
    }
    // object-store failures keep the class their types say, through the io::Error
    let store = |source: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic { store: "S3", source };
    let answered = |status: u16| {
        Box::new(HttpError::new(
            HttpErrorKind::Request,
            super::StoreAnswered {
                status: http::StatusCode::from_u16(status).unwrap(),
                body: "<Code>SlowDown</Code>".into(),
            },
        ))
    };
    let cases = [
        (store(answered(503)), IoClass::Throttled),
        (store(answered(429)), IoClass::Throttled),
        (store(answered(500)), IoClass::Unreachable),
        (
            store(Box::new(HttpError::new(
                HttpErrorKind::Connect,
                Error::other("refused"),
            ))),
            IoClass::Unreachable,
        ),
        (
            store(Box::new(HttpError::new(
                HttpErrorKind::Decode,
                Error::other("bad body"),
            ))),
            IoClass::Other,
        ),
        (store(Box::new(Error::other("something else"))), IoClass::Other),
        (
            object_store::Error::NotFound {
                path: "k".into(),
                source: Box::new(Error::other("404")),
            },
            IoClass::NotFound,
        ),
    ];
    for (e, want) in cases {
        let text = e.to_string();
        let io = super::map_err(e);
        assert_eq!(IoClass::of(&io), want, "{text}");
        assert_eq!(io.to_string(), text, "the failure shows as itself");
    }
    assert!(IoClass::Throttled.is_transient() && IoClass::Unreachable.is_transient());
    assert!(
        !IoClass::NotFound.is_transient()
            && !IoClass::PermissionDenied.is_transient()
            && !IoClass::Corrupt.is_transient()
    );
}

/// A Parquet file of 4 row groups: a small key column and a large text column.
fn parquet_file() -> Vec<u8> {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    let n = 20_000;
    let id: ArrayRef = std::sync::Arc::new(Int64Array::from_iter_values(0..n));
    let text: ArrayRef = std::sync::Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("{i:08}-{}", "x".repeat(200 + (i % 7) as usize))),
    ));
    let batch = RecordBatch::try_from_iter([("id", id), ("text", text)]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(5_000))
        .set_compression(parquet::basic::Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .build();
    let mut out = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    out
}

fn remote(bytes: Vec<u8>) -> super::Input {
    use object_store::ObjectStoreExt;
    let store: std::sync::Arc<dyn object_store::ObjectStore> =
        std::sync::Arc::new(object_store::memory::InMemory::new());
    let key = object_store::path::Path::from("t/f.parquet");
    let (st, k) = (store.clone(), key.clone());
    super::block_on(async move { st.put(&k, bytes.into()).await }).unwrap();
    super::Input::Remote(std::sync::Arc::new(
        super::input::RemoteFile::open(store, key, Default::default()).unwrap(),
    ))
}

fn read_all(input: &super::Input, columns: &[usize]) -> Vec<arrow_array::RecordBatch> {
    let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(input.clone()).unwrap();
    input.plan(b.metadata());
    let mask = parquet::arrow::ProjectionMask::roots(b.parquet_schema(), columns.to_vec());
    b.with_projection(mask).build().unwrap().map(Result::unwrap).collect()
}

#[test]
fn a_remote_parquet_file_is_read_in_column_chunk_ranges_never_whole() {
    let file = parquet_file();
    let size = file.len() as u64;
    // every column: the same rows as the whole object read at once
    let input = remote(file.clone());
    let whole: Vec<_> =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(file))
            .unwrap()
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
    assert_eq!(read_all(&input, &[0, 1]), whole);
    assert!(
        input.fetched() <= size + (64 << 10),
        "fetched {} of {size}",
        input.fetched()
    );
    assert!(
        input.peak_held() < size / 3,
        "held {} of {size} at once",
        input.peak_held()
    );
    // the key column alone: the text column (nearly all of the file) is never fetched
    let input = remote(parquet_file());
    let ids = read_all(&input, &[0]);
    assert_eq!(ids.iter().map(|b| b.num_rows()).sum::<usize>(), 20_000);
    assert!(
        input.fetched() < size / 10,
        "fetched {} of {size} for the key column",
        input.fetched()
    );
}

#[test]
fn transient_storage_failures_keep_their_class_through_the_format_libraries() {
    use crate::source::SourceError;
    let _ = super::take_noted();
    // a read that failed inside the record-batch reader: only its text reaches the Arrow error,
    // the class was noted on this thread
    super::class::note_failure(&Error::from(ErrorKind::ConnectionReset));
    let lost = arrow_schema::ArrowError::ParquetError("External: connection reset".into());
    assert!(SourceError::arrow("reading f")(lost).is_transient());
    // taken once: the next failure on this thread is what it is
    let corrupt = arrow_schema::ArrowError::ParquetError("bad magic".into());
    assert!(!SourceError::arrow("reading f")(corrupt).is_transient());
    // a failure that is not transient notes nothing
    super::class::note_failure(&Error::new(ErrorKind::InvalidData, "bad magic"));
    assert_eq!(super::take_noted(), None);
    // a Parquet error that kept the io::Error: its chain says it
    let kept = parquet::errors::ParquetError::External(Box::new(Error::from(ErrorKind::TimedOut)));
    assert!(SourceError::parquet("f")(kept).is_transient());
}

#[test]
fn a_listing_after_a_name_stops_at_the_first_unwanted_one_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    for n in [
        "00000000000000000001.json",
        "00000000000000000002.json",
        "00000000000000000002.checkpoint.parquet",
    ] {
        std::fs::write(dir.path().join(n), b"{}").unwrap();
    }
    std::fs::write(dir.path().join("_last_checkpoint"), b"{}").unwrap();
    std::fs::create_dir(dir.path().join("_sidecars")).unwrap();
    let lists = prometheus::IntCounter::new("lists", "lists").unwrap();
    let counted = lists.clone();
    let requests = super::requests::Requests::new(move |op| match op {
        super::Op::List => counted.clone(),
        _ => prometheus::IntCounter::new("other", "other").unwrap(),
    });
    let s = Storage::with_requests(StorageOptions::default(), requests);
    let digits = |n: &str| n.starts_with(|c: char| c.is_ascii_digit());
    let names: Vec<String> = s
        .list_after(dir.path(), "00000000000000000002", digits)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        ["00000000000000000002.checkpoint.parquet", "00000000000000000002.json"]
    );
    assert_eq!(lists.get(), 1);
}

/// A store endpoint on loopback that answers every request with `status` and an S3 error body.
fn answering(status: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            let mut buf = [0u8; 8192];
            let _ = c.read(&mut buf);
            let body = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
            let _ = write!(
                c,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn a_real_store_answer_or_silence_is_classed_by_type_after_the_clients_retries() {
    let storage = |endpoint: String| {
        Storage::new(StorageOptions {
            s3_endpoint: Some(endpoint),
            s3_region: Some("us-east-1".into()),
            s3_access_key_id: Some("k".into()),
            s3_secret_access_key: Some("s".into()),
            s3_path_style: true,
            s3_allow_http: true,
            s3_max_retries: 0,
            ..Default::default()
        })
    };
    let file = Path::new("s3://lake/t/f.parquet");
    let fail = |s: Storage| s.open(file).err().expect("the store answers no bytes");
    let throttled = fail(storage(answering("503 Service Unavailable")));
    assert_eq!(IoClass::of(&throttled), IoClass::Throttled, "{throttled}");
    assert!(
        throttled.to_string().contains("SlowDown"),
        "the store's answer shows: {throttled}"
    );
    let e = fail(storage(answering("429 Too Many Requests")));
    assert_eq!(IoClass::of(&e), IoClass::Throttled, "{e}");
    let e = fail(storage(answering("500 Internal Server Error")));
    assert_eq!(IoClass::of(&e), IoClass::Unreachable, "{e}");
    let e = fail(storage(answering("403 Forbidden")));
    assert_eq!(IoClass::of(&e), IoClass::PermissionDenied, "{e}");
    // nothing listening
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = fail(storage(format!("http://127.0.0.1:{port}")));
    assert_eq!(IoClass::of(&e), IoClass::Unreachable, "{e}");
}
