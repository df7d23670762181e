//! Reading a Prometheus text exposition, as a test reads a process's `/metrics`.

use std::collections::HashMap;

/// Every series of a Prometheus text exposition with its value, keyed by the name and labels
/// as rendered (`requests_total{code="200"}`); comments and unparsable lines are skipped.
pub fn series(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_keyed_by_name_and_labels() {
        let text =
            "# TYPE a counter\na_total 3\nb_bucket{le=\"+Inf\",x=\"a b\"} 2\nc_sum 0.25\nbroken\n";
        let series = series(text);
        assert_eq!(series.len(), 3);
        assert_eq!(series["a_total"], 3.0);
        assert_eq!(series["b_bucket{le=\"+Inf\",x=\"a b\"}"], 2.0);
        assert_eq!(series["c_sum"], 0.25);
    }
}
