//! `fence claim`, `fence issue`, `fence delete`, `fence adopt` and `fence retire`: an operator's
//! explicit changes.

use fence_core::{Domain, FenceError, FencingToken, WriteRequest};
use serde_json::json;

use crate::report::{token_json, Report};
use crate::targets::Targets;
use crate::{AdoptBackend, Backend, RetireBackend};

fn parse(domain: &str, token: &str) -> Result<(Domain, FencingToken), Report> {
    let domain = Domain::new(domain).map_err(|e| Report::failed(&e.into()))?;
    let token = token
        .parse::<FencingToken>()
        .map_err(|e| Report::failed(&e.into()))?;
    Ok((domain, token))
}

pub(crate) async fn claim(
    targets: &Targets,
    backend: Backend,
    domain: &str,
    token: &str,
) -> Report {
    let claimed = async {
        let (domain, token) = parse(domain, token)?;
        let target = targets.open(backend).await?;
        let claimed = target
            .fence()
            .claim(&domain, token)
            .await
            .map_err(|e| Report::failed(&e))?;
        Ok::<_, Report>((domain, claimed))
    };
    match claimed.await {
        Ok((domain, claimed)) => {
            let previous = claimed.previous_high_water_mark;
            let text = format!(
                "claimed `{domain}` with token {} (mark before: {})",
                claimed.token,
                previous.map_or("none".to_owned(), |t| t.to_string())
            );
            Report::done(
                json!({
                    "domain": domain.as_str(),
                    "token": claimed.token.to_string(),
                    "previous_mark": token_json(previous),
                }),
                text,
            )
        }
        Err(report) => report,
    }
}

/// `redis_key`: the key to adopt and, when given, the user key it becomes.
pub(crate) async fn adopt(
    targets: &Targets,
    backend: AdoptBackend,
    domain: &str,
    token: &str,
    redis_key: Option<(&str, Option<&str>)>,
) -> Report {
    let adopted = async {
        let (domain, token) = parse(domain, token)?;
        let failed = |e: FenceError| Report::failed(&e);
        let (what, previous) =
            match (backend, redis_key) {
                (AdoptBackend::S3, None) => {
                    let fence = targets.s3().await?;
                    let key = fence.object_key(&domain).map_err(failed)?;
                    let accepted = fence.adopt(&domain, token).await.map_err(failed)?;
                    (
                        format!("object `{key}` as its value"),
                        accepted.previous_high_water_mark,
                    )
                }
                (AdoptBackend::S3, Some(_)) => return Err(Report::usage(
                    "S3 adopts the object at the domain's key: --key and --user-key are for Redis",
                )),
                (AdoptBackend::Redis, None) => {
                    return Err(Report::usage("Redis needs --key: the key to adopt"))
                }
                (AdoptBackend::Redis, Some((key, None))) => {
                    let fence = targets.redis().await?;
                    let accepted = fence
                        .adopt_value(&domain, token, key)
                        .await
                        .map_err(failed)?;
                    (
                        format!("key `{key}` as its value"),
                        accepted.previous_high_water_mark,
                    )
                }
                (AdoptBackend::Redis, Some((key, Some(name)))) => {
                    let fence = targets.redis().await?;
                    let claimed = fence
                        .adopt_key(&domain, token, key, name)
                        .await
                        .map_err(failed)?;
                    (
                        format!("key `{key}` as its user key `{name}`"),
                        claimed.previous_high_water_mark,
                    )
                }
            };
        Ok::<_, Report>((domain, token, what, previous))
    };
    match adopted.await {
        Ok((domain, token, what, previous)) => Report::done(
            json!({
                "domain": domain.as_str(),
                "token": token.to_string(),
                "adopted": what,
                "previous_mark": token_json(previous),
            }),
            format!("adopted {what} into `{domain}` with token {token}"),
        ),
        Err(report) => report,
    }
}

pub(crate) async fn retire(
    targets: &Targets,
    backend: RetireBackend,
    domain: &str,
    confirmed: bool,
) -> Report {
    if !confirmed {
        return Report::usage(format!(
            "retiring `{domain}` lets any token write to it again: first claim it and make a \
             fenced delete, wait until every process that held a token ended, never reuse the \
             name (LIFECYCLE.md); then run again with --yes"
        ));
    }
    let retired = async {
        let domain = Domain::new(domain).map_err(|e| Report::failed(&e.into()))?;
        let target = targets.open(backend.into()).await?;
        let retirer = target.retirer().ok_or_else(|| {
            Report::usage(format!(
                "{} keeps a retired domain's state",
                Backend::from(backend).cli_name()
            ))
        })?;
        let retired = retirer
            .retire(&domain)
            .await
            .map_err(|e| Report::failed(&e))?;
        Ok::<_, Report>((domain, retired))
    };
    match retired.await {
        Ok((domain, retired)) => Report::done(
            json!({ "domain": domain.as_str(), "removed": retired.removed }),
            format!(
                "retired `{domain}`: {} keys, rows or objects removed",
                retired.removed
            ),
        ),
        Err(report) => report,
    }
}

pub(crate) async fn issue(targets: &Targets, backend: Backend, domain: &str) -> Report {
    let issued = async {
        let domain = Domain::new(domain).map_err(|e| Report::failed(&e.into()))?;
        let target = targets.open(backend).await?;
        let issuer = target.issuer().ok_or_else(|| {
            Report::usage(format!(
                "{} issues no tokens (take them from the issuer its writers use)",
                backend.cli_name()
            ))
        })?;
        let token = issuer
            .issue(&domain)
            .await
            .map_err(|e| Report::failed(&e))?;
        Ok::<_, Report>((domain, token))
    };
    match issued.await {
        Ok((domain, token)) => Report::done(
            json!({ "domain": domain.as_str(), "token": token.to_string() }),
            format!("issued token {token} for `{domain}`"),
        ),
        Err(report) => report,
    }
}

pub(crate) async fn delete(
    targets: &Targets,
    backend: Backend,
    domain: &str,
    token: &str,
) -> Report {
    let deleted = async {
        let (domain, token) = parse(domain, token)?;
        let target = targets.open(backend).await?;
        let store = target.store().ok_or_else(|| {
            Report::usage(format!("{} is a log: it has no delete", backend.cli_name()))
        })?;
        let outcome = store
            .write(&WriteRequest::delete(domain.clone(), token))
            .await
            .map_err(|e| Report::failed(&e))?;
        Ok::<_, Report>((domain, outcome.accepted().clone()))
    };
    match deleted.await {
        Ok((domain, accepted)) => Report::done(
            json!({
                "domain": domain.as_str(),
                "token": accepted.token.to_string(),
                "revision": accepted.revision.get(),
                "previous_mark": token_json(accepted.previous_high_water_mark),
            }),
            format!(
                "deleted the value of `{domain}` under token {} (a tombstone at revision {}; the mark stays)",
                accepted.token, accepted.revision
            ),
        ),
        Err(report) => report,
    }
}
