//! An error's whole cause chain as one line: client libraries (reqwest, rdkafka) keep the root
//! cause ("connection refused", the address) in `source()`, which `Display` leaves out.

/// `e`, then every cause whose text `e`'s does not already contain, joined by ": ".
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text = format!("{text}: {t}");
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn causes_are_appended_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let outer = std::io::Error::other(Wrap(io));
        assert_eq!(super::with_causes(&outer), "sending request: connection refused");
    }

    #[derive(Debug)]
    struct Wrap(std::io::Error);
    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("sending request")
        }
    }
    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
