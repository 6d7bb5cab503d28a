//! Bad sizes, bad ids, bad values, huge bodies, writes to `_config`, path tricks and junk
//! parameters: each gets a 4xx JSON answer, and the service keeps working afterwards.

use muster_tests::{Discovery, Reply, get, put_form, raw, register};

/// Every error must be JSON with either etcd's shape (token paths) or `{kind, message}`.
fn assert_json_error(what: &str, r: &Reply, status: u16) {
    assert_eq!(r.status, status, "{what}: {}", r.body);
    assert_eq!(r.content_type, "application/json", "{what}");
    let json = r.json();
    let etcd_shaped = json["errorCode"].is_u64()
        && json["message"].is_string()
        && json["cause"].is_string()
        && json["index"].is_u64();
    let kind_shaped = json["kind"].is_string() && json["message"].is_string();
    assert!(
        etcd_shaped || kind_shaped,
        "{what}: not a JSON error: {}",
        r.body
    );
}

#[tokio::test]
async fn bad_sizes_are_refused_with_invalid_argument() {
    let d = Discovery::start(&["--max-size", "7"]).await.expect("start");
    for q in [
        "size=0",
        "size=8",
        "size=-1",
        "size=abc",
        "size=3.5",
        "size=",
        "size=99999999999999999999",
        "size=3&size=5",
        "size=3&foo=bar",
        "%ff=1",
    ] {
        let r = get(&format!("{}/new?{q}", d.base)).await.expect("new");
        assert_json_error(q, &r, 400);
        assert_eq!(r.json()["kind"], "invalid_argument", "{q}");
    }
    let r = raw("DELETE", &format!("{}/new", d.base), &[], vec![])
        .await
        .expect("delete");
    assert_json_error("DELETE /new", &r, 405);
    assert_eq!(
        get(&format!("{}/new?size=7", d.base))
            .await
            .expect("ok")
            .status,
        200
    );
}

#[tokio::test]
async fn bad_ids_values_and_keys_are_refused() {
    let d = Discovery::start(&[]).await.expect("start");
    let url = d.new_token(3).await.expect("token");
    let cases: Vec<(&str, String, String, u16)> = vec![
        (
            "uppercase id",
            format!("{url}/ABCDEF?prevExist=false"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "id too long",
            format!("{url}/12345678901234567?prevExist=false"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "non-hex id",
            format!("{url}/xyz?prevExist=false"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "nested key",
            format!("{url}/ab/cd?prevExist=false"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "empty value",
            format!("{url}/ab?prevExist=false"),
            "".into(),
            400,
        ),
        (
            "value without url",
            format!("{url}/ab?prevExist=false"),
            "n1".into(),
            400,
        ),
        (
            "url without port",
            format!("{url}/ab?prevExist=false"),
            "n=http://h".into(),
            400,
        ),
        (
            "url with path",
            format!("{url}/ab?prevExist=false"),
            "n=http://h:1/x".into(),
            400,
        ),
        (
            "two names",
            format!("{url}/ab?prevExist=false"),
            "a=http://h:1,b=http://h:2".into(),
            400,
        ),
        ("write size", format!("{url}/_config/size"), "1".into(), 403),
        (
            "write config dir",
            format!("{url}/_config"),
            "1".into(),
            403,
        ),
        ("write token dir", url.clone(), "1".into(), 403),
        (
            "other hidden key",
            format!("{url}/_secret"),
            "1".into(),
            400,
        ),
        (
            "bad record json",
            format!("{url}/_muster/record?prevExist=false"),
            "{not json".into(),
            400,
        ),
        (
            "prevIndex on member",
            format!("{url}/ab?prevIndex=1"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "bad prevIndex",
            format!("{url}/_muster/record?prevIndex=x"),
            "{}".into(),
            400,
        ),
        (
            "bad prevExist",
            format!("{url}/ab?prevExist=maybe"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "ttl",
            format!("{url}/ab?prevExist=false&ttl=5"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "junk param",
            format!("{url}/ab?prevExist=false&x=1"),
            "n=http://h:1".into(),
            400,
        ),
        (
            "dup param",
            format!("{url}/ab?prevExist=false&prevExist=false"),
            "n=http://h:1".into(),
            400,
        ),
    ];
    for (what, target, value, status) in &cases {
        let r = put_form(target, &[("value", value)]).await.expect("put");
        assert_json_error(what, &r, *status);
    }
    // A huge value inside a small body limit is still refused by the value cap.
    let long = format!("n=http://{}:1", "h".repeat(5000));
    let r = register(&url, "ab", &long).await.expect("put");
    assert_json_error("4 KiB+ value", &r, 400);
    // Nothing above created a key.
    let dir = get(&url).await.expect("dir");
    assert_eq!(dir.index, Some(1), "{}", dir.body);
    assert_eq!(
        register(&url, "ab", "n=http://h:1")
            .await
            .expect("ok")
            .status,
        201
    );
}

#[tokio::test]
async fn huge_and_odd_bodies_are_refused() {
    let d = Discovery::start(&[]).await.expect("start");
    let url = d.new_token(3).await.expect("token");
    let form = "application/x-www-form-urlencoded";
    let big = format!("value={}", "a".repeat(70 * 1024)).into_bytes();
    let r = raw(
        "PUT",
        &format!("{url}/ab?prevExist=false"),
        &[("content-type", form)],
        big.clone(),
    )
    .await
    .expect("put");
    assert_json_error("70 KiB body", &r, 413);
    // A token path answers in etcd's shape.
    assert!(r.json()["errorCode"].is_u64(), "{}", r.body);
    let r = raw(
        "POST",
        &format!("{}/new", d.base),
        &[("content-type", form)],
        big,
    )
    .await
    .expect("post");
    assert_json_error("70 KiB /new body", &r, 413);
    assert_eq!(r.json()["kind"], "payload_too_large", "{}", r.body);
    let r = raw(
        "PUT",
        &format!("{url}/ab?prevExist=false"),
        &[("content-type", "application/json")],
        br#"{"value":"x"}"#.to_vec(),
    )
    .await
    .expect("json body");
    assert_json_error("json content type", &r, 400);
    let r = raw(
        "PUT",
        &format!("{url}/ab?prevExist=false"),
        &[("content-type", form)],
        vec![0xff, 0xfe, 0x00],
    )
    .await
    .expect("binary");
    assert_json_error("binary body", &r, 400);
    for method in ["DELETE", "POST", "PATCH"] {
        let r = raw(method, &format!("{url}/ab"), &[], vec![])
            .await
            .expect("method");
        assert_json_error(method, &r, 405);
    }
    assert_eq!(
        register(&url, "ab", "n=http://h:1")
            .await
            .expect("ok")
            .status,
        201
    );
}

#[tokio::test]
async fn path_tricks_and_junk_queries_get_json_errors() {
    let d = Discovery::start(&[]).await.expect("start");
    let url = d.new_token(3).await.expect("token");
    let tok = muster_tests::token_of(&url).to_string();
    let base = &d.base;
    let cases: Vec<(String, u16)> = vec![
        (format!("{base}/{tok}/..%2f..%2fetc"), 400),
        (format!("{base}/{tok}/a%00b"), 400),
        (format!("{base}/{tok}//x"), 400),
        (format!("{base}/{tok}/a/b/c/d"), 400),
        (format!("{base}/{}", tok.to_uppercase()), 404),
        (format!("{base}/nottoken"), 404),
        (format!("{base}/{tok}x"), 404),
        (format!("{base}/{tok}/missing"), 404),
        (format!("{url}?wait=true&waitIndex=abc"), 400),
        (format!("{url}?wait=true&waitIndex=-1"), 400),
        (format!("{url}?wait=maybe"), 400),
        (format!("{url}?stream=true&wait=true"), 400),
        (format!("{url}?recursive=true&recursive=false"), 400),
        (format!("{url}?foo=bar"), 400),
        (format!("{url}?%zz=1"), 400),
        (format!("{url}?{}=1", "k".repeat(3000)), 400),
    ];
    for (target, status) in &cases {
        let r = get(target).await.expect("get");
        assert_json_error(target, &r, *status);
    }
    // Still healthy, and the token still works.
    assert_eq!(
        get(&format!("{base}/health")).await.expect("health").status,
        200
    );
    assert_eq!(
        register(&url, "ab", "n=http://h:1")
            .await
            .expect("ok")
            .status,
        201
    );
}

#[tokio::test]
async fn registrations_per_token_are_capped() {
    let d = Discovery::start(&[]).await.expect("start");
    let url = d.new_token(1).await.expect("token");
    let mut accepted = 0;
    let mut limited = None;
    for i in 1..=40u32 {
        let r = register(&url, &format!("{i:x}"), &format!("n{i}=http://h:1"))
            .await
            .expect("put");
        match r.status {
            201 => accepted += 1,
            _ => {
                limited = Some(r);
                break;
            }
        }
    }
    let r = limited.expect("a cap must stop registrations");
    assert_json_error("over cap", &r, 403);
    assert_eq!(r.json()["errorCode"], 1001);
    assert_eq!(accepted, 17, "size 1 + 16 extra");
}
