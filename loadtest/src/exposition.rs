//! Reading a Baton node's `/metrics` (Prometheus text format 0.0.4): the one
//! scrape and parser every benchmark that looks at the server's own counters
//! and gauges uses.

use std::time::Duration;

/// A node's `/metrics` text (`None` when it does not answer). With a million
/// locks a scrape walks the whole state: a benchmark takes one at each end of
/// a run, or polls no more often than every few hundred milliseconds.
pub async fn scrape(http: &reqwest::Client, base: &str) -> Option<String> {
    http.get(format!("{base}/metrics"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// The sum of every series of metric `name` in a Prometheus exposition
/// (`None` when it has none): the value itself for an unlabelled gauge.
pub fn metric_sum(exposition: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let rest = match rest.strip_prefix('{') {
                Some(labelled) => &labelled[labelled.find('}')? + 1..],
                None => rest,
            };
            let value = rest.strip_prefix(' ')?.split_whitespace().next()?;
            value.parse::<f64>().ok()
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>())
}

/// The value of gauge `name` as a count (`None` when the exposition has none).
pub fn count(exposition: &str, name: &str) -> Option<u64> {
    metric_sum(exposition, name).map(|value| value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_adds_labelled_and_unlabelled_series() {
        let text = "# TYPE baton_snapshots_built_total counter\n\
                    baton_snapshots_built_total 3\n\
                    baton_snapshots_built_totals 7\n";
        assert_eq!(metric_sum(text, "baton_snapshots_built_total"), Some(3.0));
        let labelled = "x_total{reason=\"a\"} 2\nx_total{reason=\"b\"} 5\n";
        assert_eq!(metric_sum(labelled, "x_total"), Some(7.0));
        assert_eq!(metric_sum(labelled, "y_total"), None);
    }

    #[test]
    fn count_reads_the_unlabelled_value() {
        let text = "# HELP baton_locks_held Locks.\n# TYPE baton_locks_held gauge\n\
                    baton_locks_held 1000000\nbaton_locks_held_x 3\n";
        assert_eq!(count(text, "baton_locks_held"), Some(1_000_000));
        assert_eq!(count(text, "baton_leases"), None);
    }
}
