//! Keystone: a token cached and renewed before it expires, and never shown.

use super::*;

/// A stand-in for Keystone's `POST /v3/auth/tokens`: issues the token "admin" (which Placement's
/// noauth2 accepts) valid for `lifetime_s`, or refuses every request with 401 when `refuse`.
/// Returns the URL and a counter of token requests.
async fn fake_keystone(
    lifetime_s: i64,
    refuse: bool,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v3", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read the head, then as many body bytes as Content-Length says.
            loop {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let text = String::from_utf8_lossy(&buf).to_string();
            assert!(text.starts_with("POST /v3/auth/tokens "), "{text}");
            c.fetch_add(1, Ordering::SeqCst);
            let resp = if refuse {
                let body = r#"{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}"#;
                format!("HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
            } else {
                let expires = (time::OffsetDateTime::now_utc()
                    + time::Duration::seconds(lifetime_s))
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap();
                let body = format!(
                    r#"{{"token": {{"expires_at": "{expires}", "methods": ["password"]}}}}"#
                );
                format!("HTTP/1.1 201 Created\r\nx-subject-token: admin\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
            };
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (url, count)
}

#[tokio::test(flavor = "current_thread")]
async fn keystone_token_is_cached_renewed_and_never_shown() {
    use std::sync::atomic::Ordering;
    let Some(srv) = server("keystone") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut host = SyntheticHost::small();
    let node = Uuid::new_v4();
    let secret = "Pa55-w0rd-never-shown";
    let auth = |url: &str| {
        format!("auth = \"password\"\nauth_url = \"{url}\"\nusername = \"rtrack\"\npassword = \"{secret}\"\nproject_name = \"service\"\n")
    };

    // A token valid for 66 s is renewed 60 s before it expires, i.e. after about 6 s: long
    // enough for the first two reports on a loaded machine (with 1 s, CI's load once made the
    // second report ask for a new token), short enough to wait for.
    let (url, issued) = fake_keystone(66, false).await;
    let cfg = config(&srv.url, &auth(&url));
    let mut r = reporter(&cfg);
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("a")), &cfg),
        &cfg,
        node,
        "cmp-ks",
        false,
        &[],
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(
        issued.load(Ordering::SeqCst),
        1,
        "one token for the whole first report"
    );
    host.memory_mb_per_node = 12288;
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("b")), &cfg),
        &cfg,
        node,
        "cmp-ks",
        false,
        &[],
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(issued.load(Ordering::SeqCst), 1, "cached");
    tokio::time::sleep(Duration::from_millis(6200)).await;
    host.memory_mb_per_node = 14336;
    let d = DesiredState::build(
        &view(&probe(&host, &tmp.path().join("c")), &cfg),
        &cfg,
        node,
        "cmp-ks",
        false,
        &[],
    )
    .unwrap();
    r.report(&d).await.unwrap();
    assert_eq!(issued.load(Ordering::SeqCst), 2, "renewed before expiry");
    assert_eq!(r.api().keystone_requests(), 2);
    assert_placement_matches(&srv.client(), &d).await;

    // Keystone refuses: the error says so and names the user, never the password.
    let (url, _) = fake_keystone(3600, true).await;
    let cfg = config(&srv.url, &auth(&url));
    let e = reporter(&cfg).report(&d).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, UpstreamError::Auth { .. }), "{msg}");
    assert!(msg.contains("401") && msg.contains("rtrack"), "{msg}");
    assert!(
        !msg.contains(secret) && !format!("{e:?}").contains(secret),
        "{msg}"
    );
    // A logged configuration does not show it either.
    assert!(!format!("{cfg:?}").contains(secret), "{cfg:?}");
    let settings = rtrack::upstream::validate_placement(&cfg.placement);
    assert!(!format!("{settings:?}").contains(secret));
}
