//! How large an object is as JSON, for the limits the API server and the bus set.

/// The bytes `value` takes as compact JSON, counted as it is written: no buffer is filled, so a
/// large object (an EventReport of thousands of resources) costs no reallocations or fresh
/// pages to measure. `usize::MAX` if it does not serialize.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_what_serde_json_writes() {
        let value =
            json!({"metadata": {"name": "a\"b", "labels": {"k": "ü"}}, "n": [1, 2.5, null]});
        let written = serde_json::to_vec(&value).expect("serializes");
        assert_eq!(json_len(&value), written.len());
    }
}
