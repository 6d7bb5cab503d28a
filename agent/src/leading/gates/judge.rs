//! The pure half of the health gates: whether a Prometheus answer lets a reboot through, and
//! how text from outside (alert names, a command's stderr) is made fit for a refusal that
//! Zincati logs. Table-tested; the runner (`super`) only fetches and runs.

use serde_json::Value;

/// Alert names a refusal lists; the rest are counted.
const NAMES_LISTED: usize = 5;
/// Longest piece of outside text (an alert name, a line of stderr) a refusal quotes.
pub const QUOTED_CHARS: usize = 200;

/// What a Prometheus query API answer (`/api/v1/query`) or alerts API answer
/// (`/api/v1/alerts`) says: `Ok` only for a successful answer with no series (query) or no
/// firing alert (alerts); otherwise why not, in words. Anything else refuses: a gate fails
/// closed.
pub fn judge_prometheus(body: &[u8]) -> Result<(), String> {
    let answer: Value = serde_json::from_slice(body).map_err(|_| {
        "the answer is not JSON (is the URL a Prometheus /api/v1/query or /api/v1/alerts URL?)"
            .to_string()
    })?;
    match answer.get("status").and_then(Value::as_str) {
        Some("success") => {}
        Some(other) => {
            let error = answer.get("error").and_then(Value::as_str).unwrap_or("");
            return Err(format!(
                "Prometheus answered status {}: {}",
                clean(other),
                clean(error)
            ));
        }
        None => return Err("the answer has no \"status\": not a Prometheus API answer".into()),
    }
    let data = answer.get("data");
    if let Some(result) = data.and_then(|d| d.get("result")) {
        let kind = data
            .and_then(|d| d.get("resultType"))
            .and_then(Value::as_str)
            .unwrap_or("vector");
        if !matches!(kind, "vector" | "matrix") {
            return Err(format!(
                "the query returned a {}, not a vector: query alerts, e.g. \
                 ALERTS{{alertstate=\"firing\"}}",
                clean(kind)
            ));
        }
        let series = result
            .as_array()
            .ok_or("data.result is not a list: not a Prometheus query answer")?;
        return firing(series.iter().map(|s| s.get("metric")));
    }
    if let Some(alerts) = data.and_then(|d| d.get("alerts")) {
        let alerts = alerts
            .as_array()
            .ok_or("data.alerts is not a list: not a Prometheus alerts answer")?;
        return firing(
            alerts
                .iter()
                .filter(|a| a.get("state").and_then(Value::as_str) == Some("firing"))
                .map(|a| a.get("labels")),
        );
    }
    Err(
        "the answer has neither data.result nor data.alerts: not a Prometheus query or alerts \
         answer"
            .into(),
    )
}

/// `Ok` when nothing fires; else how many and the first few names (their `alertname` labels).
fn firing<'a>(labels: impl Iterator<Item = Option<&'a Value>>) -> Result<(), String> {
    let mut count = 0usize;
    let mut names: Vec<String> = Vec::new();
    for l in labels {
        count += 1;
        if let Some(name) = l
            .and_then(|l| l.get("alertname"))
            .and_then(Value::as_str)
            .map(clean)
            && !names.contains(&name)
            && names.len() < NAMES_LISTED
        {
            names.push(name);
        }
    }
    match (count, names.is_empty()) {
        (0, _) => Ok(()),
        (n, true) => Err(format!("{n} series returned (the query must return none)")),
        (n, false) => {
            let alerts = if n == 1 { "alert" } else { "alerts" };
            Err(format!("{n} {alerts} firing: {}", names.join(", ")))
        }
    }
}

/// Outside text fit to quote: its first line, control characters removed, at most
/// [`QUOTED_CHARS`] characters.
pub fn clean(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("");
    let mut out: String = line
        .chars()
        .filter(|c| !c.is_control())
        .take(QUOTED_CHARS)
        .collect();
    if line.chars().filter(|c| !c.is_control()).count() > QUOTED_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_answer_with_nothing_firing_passes() {
        let cases: &[(&str, Result<(), &str>)] = &[
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                Ok(()),
            ),
            (r#"{"status":"success","data":{"result":[]}}"#, Ok(())),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[
                    {"metric":{"alertname":"NodeDown","alertstate":"firing"},"value":[1,"1"]},
                    {"metric":{"alertname":"DiskFull"},"value":[1,"1"]},
                    {"metric":{"alertname":"NodeDown"},"value":[1,"1"]}]}}"#,
                Err("3 alerts firing: NodeDown, DiskFull"),
            ),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]}]}}"#,
                Err("1 series returned"),
            ),
            (
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#,
                Err("not a vector"),
            ),
            (
                r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#,
                Err("status error: parse error"),
            ),
            (
                r#"{"status":"success","data":{"alerts":[{"labels":{"alertname":"Pending"},"state":"pending"}]}}"#,
                Ok(()),
            ),
            (
                r#"{"status":"success","data":{"alerts":[{"labels":{"alertname":"Hot"},"state":"firing"}]}}"#,
                Err("1 alert firing: Hot"),
            ),
            (r#"{"status":"success","data":{}}"#, Err("neither")),
            (r#"{"data":{"result":[]}}"#, Err("no \"status\"")),
            ("<html>", Err("not JSON")),
            (
                r#"{"status":"success","data":{"result":{}}}"#,
                Err("not a list"),
            ),
        ];
        for (body, want) in cases {
            let got = judge_prometheus(body.as_bytes());
            match (want, &got) {
                (Ok(()), Ok(())) => {}
                (Err(says), Err(e)) if e.contains(says) => {}
                _ => panic!("{body}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn many_alerts_are_named_up_to_five_and_counted() {
        let series: Vec<String> = (0..9)
            .map(|i| format!(r#"{{"metric":{{"alertname":"A{i}"}}}}"#))
            .collect();
        let body = format!(
            r#"{{"status":"success","data":{{"result":[{}]}}}}"#,
            series.join(",")
        );
        let e = judge_prometheus(body.as_bytes()).expect_err("firing");
        assert_eq!(e, "9 alerts firing: A0, A1, A2, A3, A4");
    }

    #[test]
    fn quoted_text_is_one_clean_bounded_line() {
        assert_eq!(
            clean("  not drained\x1b[31m\nsecond line"),
            "not drained[31m"
        );
        assert_eq!(clean(""), "");
        let long = "x".repeat(500);
        assert_eq!(clean(&long).chars().count(), QUOTED_CHARS + 1);
    }
}
