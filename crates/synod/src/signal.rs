//! Waiting for the signals that stop a long-running subcommand.

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, whichever comes first; returns its name.
pub async fn shutdown() -> &'static str {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => "SIGINT",
        _ = term => "SIGTERM",
    }
}
