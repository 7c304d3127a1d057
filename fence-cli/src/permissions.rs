//! `fence permissions`: which permissions the configured credentials have at a backend, each
//! named as the resource's access control names it.

use fence_core::permissions::{Access, PermissionReport, Role};
use serde_json::{json, Value};

use crate::report::Report;
use crate::targets::Targets;
use crate::Backend;

/// Runs the backend's permission check: exit 0 when everything the role needs was granted (a
/// worker's: the operators' permissions left out; `operator`: all of them), 1 otherwise.
pub(crate) async fn run(targets: &Targets, backend: Backend, operator: bool) -> Report {
    let role = if operator {
        Role::Operator
    } else {
        Role::Worker
    };
    match check(targets, backend).await {
        Ok(report) => render(&report, role),
        Err(report) => report,
    }
}

async fn check(targets: &Targets, backend: Backend) -> Result<PermissionReport, Report> {
    let target = targets.open(backend).await?;
    target
        .check_permissions()
        .await
        .map_err(|e| Report::failed(&e))
}

fn render(report: &PermissionReport, role: Role) -> Report {
    let permissions: Vec<Value> = report
        .permissions
        .iter()
        .map(|p| {
            let (access, detail) = match &p.access {
                Access::Granted => ("granted", None),
                Access::Denied(answer) => ("denied", Some(answer.as_str())),
                Access::Unknown(why) => ("unknown", Some(why.as_str())),
                _ => ("unknown", None),
            };
            let needed_by = match p.role {
                Role::Operator => "operators",
                _ => "workers",
            };
            json!({ "name": p.name, "needed_for": p.needed_for, "needed_by": needed_by, "access": access, "detail": detail })
        })
        .collect();
    let json = json!({
        "backend": report.backend,
        "scope": report.scope,
        "all_granted": report.all_granted(),
        "granted_for_workers": report.granted_for(Role::Worker),
        "permissions": permissions,
    });
    let mut done = Report::done(json, report.to_string().trim_end().to_owned());
    if !report.granted_for(role) {
        let who = if role == Role::Operator {
            "an operator"
        } else {
            "a worker"
        };
        done.fail_if_done(
            "permissions",
            &format!("the credentials lack permissions {who} needs: grant the denied ones above"),
            false,
        );
    }
    done
}
