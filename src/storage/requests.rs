//! A connector's storage requests, counted by kind (`lakestream_storage_requests_total{connector,
//! op}`): what a poll costs, shown (issue 32). Local files count the same way (a directory read
//! is a list, a whole file a get, a size a head), so a test on local tables sees what the same
//! poll asks of an object store. A remote listing counts one request per page of 1,000 names.

use std::sync::Arc;

use prometheus::IntCounter;

/// Kinds of storage request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    List,
    Get,
    RangedGet,
    Head,
    /// A request to the table's catalog (Iceberg REST, AWS Glue): a lookup of its metadata, a
    /// listing of table discovery, a token.
    Catalog,
}

const OPS: [Op; 5] = [Op::List, Op::Get, Op::RangedGet, Op::Head, Op::Catalog];

impl Op {
    pub fn label(self) -> &'static str {
        match self {
            Op::List => "list",
            Op::Get => "get",
            Op::RangedGet => "ranged_get",
            Op::Head => "head",
            Op::Catalog => "catalog",
        }
    }
}

/// One connector's request counters (none: requests are not counted, e.g. `validate`'s own
/// reads or a unit test's).
#[derive(Clone, Default)]
pub struct Requests {
    counters: Option<Arc<[IntCounter; 5]>>,
}

impl Requests {
    /// Counting into `counter(op)` for each kind (the connector's series of
    /// `lakestream_storage_requests_total`, made where the connector is known).
    pub fn new(counter: impl Fn(Op) -> IntCounter) -> Self {
        Requests {
            counters: Some(Arc::new(OPS.map(counter))),
        }
    }

    pub fn count(&self, op: Op, n: u64) {
        if let Some(c) = &self.counters {
            c[OPS.iter().position(|o| *o == op).unwrap_or(0)].inc_by(n);
        }
    }

    /// A listing of `names` names: one request per page of 1,000.
    pub fn listed(&self, names: usize) {
        self.count(Op::List, 1 + names as u64 / 1000);
    }
}
