//! The built `pier` binary: `check`, `run` and `demo` as users invoke them.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::web::*;
use support::*;

fn pier() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pier"))
}

#[test]
fn check_prints_status_yaml_for_the_examples() {
    let out = pier()
        .args(["check", "--manifests", "config/examples/quickstart"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("kind: Gateway"), "{stdout}");
    assert!(stdout.contains("kind: HTTPRoute"), "{stdout}");
    assert!(stdout.contains("Accepted"), "{stdout}");
}

/// `config/examples/mesh-identity` with its certificates made by its own script: every route's
/// backends checked per endpoint, SPIFFE on one Gateway and Linkerd on the other.
#[test]
fn the_mesh_identity_example_checks_identities_per_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["00-gateway.yaml", "10-backends.yaml", "20-routes.yaml"] {
        std::fs::copy(
            format!("config/examples/mesh-identity/{f}"),
            dir.path().join(f),
        )
        .unwrap();
    }
    let made = Command::new("config/examples/mesh-identity/gen-certs.sh")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let out = pier()
        .args(["check", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for (route, scheme) in [
        ("web", "SPIFFE"),
        ("stale", "SPIFFE"),
        ("web-l5d", "Linkerd"),
    ] {
        let want = format!("shop/{route}:443 mesh mTLS, {scheme} identity checked per endpoint");
        assert!(stdout.contains(&want), "{want} not in {stdout}");
    }
    assert!(!stdout.contains("NoEndpointIdentity"), "{stdout}");
}

#[test]
fn the_tls_and_listener_set_example_is_all_accepted() {
    let out = pier()
        .args(["check", "--manifests", "config/examples/tls"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Vec<serde_json::Value> =
        serde_saphyr::from_str::<serde_json::Value>(&String::from_utf8_lossy(&out.stdout))
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
    let kinds: Vec<&str> = status.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in ["Gateway", "ListenerSet", "TLSRoute", "HTTPRoute"] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }
    // Every condition pier reports is True but Conflicted (nothing refused or unresolved).
    let mut checked = 0;
    for o in &status {
        let s = &o["status"];
        let lists = [&s["conditions"]]
            .into_iter()
            .chain(
                s["listeners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| &l["conditions"]),
            )
            .chain(
                s["parents"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| &p["conditions"]),
            );
        for c in lists.filter_map(|c| c.as_array()).flatten() {
            checked += 1;
            if c["type"] != "Conflicted" {
                assert_eq!(
                    c["status"], "True",
                    "{} {}: {c}",
                    o["kind"], o["metadata"]["name"]
                );
            }
        }
    }
    assert!(checked >= 20, "{checked} conditions");
}

#[test]
fn check_reports_unresolved_references_as_status_not_failure() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        format!("{}---\n{}", gateway(8080), route("r", "/", "missing")),
    )
    .unwrap();
    let out = pier()
        .args(["check", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("BackendNotFound"), "{stdout}");
}

/// `pier check` on a directory holding only `file` with `text`: must fail; returns stderr.
fn check_fails_on(file: &str, text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(file), text).unwrap();
    let out = pier()
        .args(["check", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_fails_on_malformed_yaml_naming_the_file() {
    let stderr = check_fails_on("broken.yaml", "kind: HTTPRoute\nspec: [unclosed\n");
    assert!(stderr.contains("broken.yaml"), "{stderr}");
    // Called what it is, with the parser's reason, said once.
    assert!(stderr.contains("invalid YAML: "), "{stderr}");
    assert!(!stderr.contains("not a Kubernetes object"), "{stderr}");
    assert_eq!(stderr.matches("document 1").count(), 1, "{stderr}");
}

#[test]
fn check_names_the_file_object_and_field_of_a_type_error() {
    let stderr = check_fails_on(
        "routes.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {name: web, namespace: shop}\n\
         spec:\n  rules:\n  - matches: [{path: {type: Prefixx, value: /}}]\n",
    );
    let expected = "routes.yaml: document 2 (line 10): invalid HTTPRoute shop/web: \
                    spec.rules[0].matches[0].path.type: unknown variant `Prefixx`";
    assert!(stderr.contains(expected), "{stderr}");
    assert_eq!(stderr.matches("unknown variant").count(), 1, "{stderr}");
}

#[test]
fn check_fails_on_a_missing_directory() {
    let out = pier()
        .args(["check", "--manifests", "/nonexistent/pier"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/pier"), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

/// `--output-file`: the status YAML goes to the file, nothing to stdout.
#[test]
fn check_writes_the_status_to_the_output_file() {
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("status.yaml");
    let out = pier()
        .args([
            "check",
            "--manifests",
            "config/examples/quickstart",
            "--output-file",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let yaml = std::fs::read_to_string(&file).unwrap();
    assert!(yaml.contains("kind: HTTPRoute"), "{yaml}");
}

/// A status file written where the next load would read it as a manifest is refused, naming
/// both paths, before anything is written; a file the load does not read is fine.
#[test]
fn check_refuses_an_output_file_the_next_load_of_the_manifests_would_read() {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir("config/examples/quickstart").unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for (cwd, manifests, output) in [
        (".", dir.path().to_str().unwrap(), "check.yaml"),
        (".", dir.path().to_str().unwrap(), "sub/check.yml"),
        ("sub", "..", "../check.yaml"),
    ] {
        let output_path = dir.path().join(output);
        let output = if cwd == "." {
            output_path.to_str().unwrap().to_string()
        } else {
            output.to_string()
        };
        let out = pier()
            .current_dir(dir.path().join(cwd))
            .args(["check", "--manifests", manifests, "--output-file", &output])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{output}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "--output-file {output} is inside --manifests {manifests}, where the next load \
                 would read it as a manifest"
            )),
            "{stderr}"
        );
        assert!(!dir.path().join("check.yaml").exists());
        assert!(!dir.path().join("sub/check.yml").exists());
    }
    let out = pier()
        .current_dir(dir.path())
        .args(["check", "--manifests", ".", "--output-file", "check.txt"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(dir.path().join("check.txt").exists());
}

/// A kind of a group pier reads that it does not read (a misspelling) is a warning naming the
/// file, its line, and the kind likely meant.
#[test]
fn check_warns_of_a_misspelled_kind_with_the_nearest_kind() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("routes.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRout\nmetadata: {name: web}\n",
    )
    .unwrap();
    let out = pier()
        .args(["check", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "warning: {}:5: HTTPRout is not a kind of gateway.networking.k8s.io that pier reads \
         (did you mean HTTPRoute?)",
        file.display()
    );
    assert!(stderr.contains(&want), "{stderr}");
}

/// A misspelt field (`backendRef:` for `backendRefs:`) is not dropped silently: `pier check`
/// warns with the file, the object, the field's path and the field meant, and the route's
/// status carries `pier.dev/UnknownFields`.
#[test]
fn check_warns_of_a_misspelt_field_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("routes.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  gatewayClassName: pier
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRef: [{name: svc, port: 80}]
"#,
    )
    .unwrap();
    let out = pier()
        .args(["check", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "warning: {}:13: HTTPRoute default/web: unknown field spec.rules[0].backendRef (did \
         you mean backendRefs?); it is ignored",
        file.display()
    );
    assert!(stderr.contains(&want), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("type: pier.dev/UnknownFields"), "{stdout}");
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status();
    for _ in 0..200 {
        if let Some(s) = child.0.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("pier did not exit after SIGTERM");
}

/// `pier run ARGS --manifests DIR` with its log in `DIR/stderr.log` (which pier never reads as
/// a manifest): waits until the log says `ready`, stops pier with SIGTERM (it must exit
/// cleanly), and returns the log.
async fn run_until_ready(dir: &std::path::Path, args: &[&str], ready: &str) -> String {
    let log_path = dir.join("stderr.log");
    let mut child = Child(
        pier()
            .arg("run")
            .args(args)
            .arg("--manifests")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
            .spawn()
            .unwrap(),
    );
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    eventually(Duration::from_secs(10), || async { read().contains(ready) }).await;
    assert!(terminate(&mut child).success());
    read()
}

/// A problem the status reports (a Route's backend not found) is logged at WARN once, with the
/// object and the reason, not on every reload; when it goes away, that is logged too.
#[tokio::test]
async fn run_logs_a_route_problem_once_and_its_resolution() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("gw.yaml"), gateway(port)).unwrap();
    std::fs::write(dir.path().join("route.yaml"), route("r", "/", "a")).unwrap();
    let (mut child, _admin, read) = run_logged(dir.path(), &[]);
    let lines = |text: &str, what: &str| text.lines().filter(|l| l.contains(what)).count();
    eventually(Duration::from_secs(10), || async {
        read().contains("reason=BackendNotFound")
    })
    .await;
    // Another reload with the problem still there (an unrelated file): not logged again.
    std::fs::write(
        dir.path().join("ns.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
    )
    .unwrap();
    eventually(Duration::from_secs(10), || async {
        lines(&read(), "manifests reloaded") >= 1
    })
    .await;
    std::fs::write(dir.path().join("svc.yaml"), service("a", echo.addr)).unwrap();
    eventually(Duration::from_secs(10), || async {
        read().contains("resolved")
    })
    .await;
    assert!(terminate(&mut child).success());
    let text = read();
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("reason=BackendNotFound"))
        .collect();
    assert_eq!(warned.len(), 2, "one WARN and one resolved line: {text}");
    assert!(warned[0].contains(" WARN "), "{text}");
    assert!(
        warned[0].contains("kind=HTTPRoute object=default/r"),
        "{text}"
    );
    assert!(warned[0].contains("condition=ResolvedRefs"), "{text}");
    assert!(
        warned[1].contains(" INFO ") && warned[1].contains("resolved"),
        "{text}"
    );
}

/// An echo backend and a manifest directory routing a Gateway on a free port (returned) to it;
/// both must outlive the pier that serves them.
async fn one_route() -> (pier::echo::EchoServer, tempfile::TempDir, u16) {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "{}---\n{}---\n{}",
            gateway(port),
            service("a", echo.addr),
            route("r", "/", "a")
        ),
    )
    .unwrap();
    (echo, dir, port)
}

/// `pier run` on one echo backend, with `env` set, once ready: the process, the listener's
/// port, and the echo backend and manifest directory (which must outlive the process).
async fn run_one_route(
    env: &[(&str, &str)],
) -> (Child, u16, pier::echo::EchoServer, tempfile::TempDir) {
    let (echo, dir, port) = one_route().await;
    let child = start_pier(dir.path(), free_port(), env, &["--log-format", "json"]).await;
    (child, port, echo, dir)
}

#[tokio::test]
async fn run_serves_and_exits_cleanly_on_sigterm() {
    let (mut child, port, _echo, _dir) = run_one_route(&[]).await;
    let r = get(&format!("http://127.0.0.1:{port}/"), &[]).await;
    assert_eq!(r.backend(), "a");
    assert!(terminate(&mut child).success());
}

/// Text logs to a file (as under journald or a redirect) carry no ANSI colour codes.
#[tokio::test]
async fn text_logs_off_a_terminal_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("gw.yaml"), gateway(port)).unwrap();
    let text = run_until_ready(
        dir.path(),
        &["--listen-host", "127.0.0.1", "--admin", "127.0.0.1:0"],
        "ready",
    )
    .await;
    assert!(text.contains(" INFO "), "{text}");
    assert!(!text.contains('\x1b'), "ANSI escapes in {text:?}");
}

/// On a terminal text logs are coloured, unless `NO_COLOR` is set (no-color.org). The terminal
/// is the pseudo-terminal of util-linux `script`; `timeout` ends pier after its start-up lines.
#[test]
fn text_logs_on_a_terminal_are_coloured_unless_no_color_is_set() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gw.yaml"), gateway(free_port())).unwrap();
    let run = |no_color: Option<&str>| {
        let typescript = dir.path().join("typescript");
        let command = format!(
            "timeout -s TERM 2 {} run --listen-host 127.0.0.1 --admin 127.0.0.1:0 --manifests {}",
            env!("CARGO_BIN_EXE_pier"),
            dir.path().display()
        );
        let mut script = Command::new("script");
        script
            .args(["-q", "-e", "-c", &command])
            .arg(&typescript)
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(v) = no_color {
            script.env("NO_COLOR", v);
        }
        script.status().expect("util-linux script runs");
        std::fs::read_to_string(&typescript).unwrap()
    };
    let coloured = run(None);
    assert!(coloured.contains("ready"), "{coloured}");
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = run(Some("1"));
    assert!(plain.contains("ready"), "{plain}");
    assert!(
        !plain.contains('\x1b'),
        "ANSI escapes with NO_COLOR: {plain:?}"
    );
}

/// `pier run --manifests dir` with `args`, its text log going to a file; returns the process,
/// its admin address, and a reader of the log so far.
fn run_logged(dir: &std::path::Path, args: &[&str]) -> (Child, String, impl Fn() -> String) {
    run_logged_by(pier(), dir, args)
}

/// [`run_logged`] with `command` as the pier to start (a wrapper that execs pier, say).
fn run_logged_by(
    mut command: Command,
    dir: &std::path::Path,
    args: &[&str],
) -> (Child, String, impl Fn() -> String) {
    let admin = format!("127.0.0.1:{}", free_port());
    let log_path = dir.join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = Child(
        command
            .args(["run", "--listen-host", "127.0.0.1", "--admin", &admin])
            .args(args)
            .arg("--manifests")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    );
    let read = move || std::fs::read_to_string(&log_path).unwrap_or_default();
    (child, admin, read)
}

/// Ready with nothing to serve stays ready (200: pier does what its configuration says, and
/// readiness never turns false again), but a WARN says why nothing is served: no Gateway, or
/// no GatewayClass with pier's controllerName (naming the ones there are).
#[tokio::test]
async fn serving_nothing_is_warned_with_the_reason() {
    let empty = tempfile::tempdir().unwrap();
    let quickstart = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir("config/examples/quickstart").unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, quickstart.path().join(f.file_name().unwrap())).unwrap();
    }
    for (dir, args, reason) in [
        (
            empty.path(),
            &[][..],
            "there is no Gateway in the configuration",
        ),
        (
            quickstart.path(),
            &["--controller-name", "example.com/other"],
            "no GatewayClass has spec.controllerName example.com/other (--controller-name); \
             GatewayClasses: pier (pier.dev/gateway-controller)",
        ),
    ] {
        let (mut child, admin, read) = run_logged(dir, args);
        eventually(Duration::from_secs(10), || async {
            read().contains(" ready ")
        })
        .await;
        let r = get(&format!("http://{admin}/readyz"), &[]).await;
        assert_eq!(r.status, 200);
        let body = r.text();
        assert!(
            body.starts_with("ready, serving no listener: ") && body.contains(reason),
            "{body}"
        );
        assert!(terminate(&mut child).success());
        let log = read();
        let warn = log
            .lines()
            .find(|l| l.contains("WARN") && l.contains("serving no listener"))
            .unwrap_or_else(|| panic!("no warning in {log}"));
        assert!(warn.contains(reason), "{warn}");
    }
}

/// `--ready-requires-listener` (here from its environment variable): with nothing to serve,
/// `/readyz` is 503 and says why, and the log says that it is.
#[tokio::test]
async fn ready_requires_listener_makes_serving_nothing_not_ready() {
    let empty = tempfile::tempdir().unwrap();
    let mut command = pier();
    command.env("PIER_READY_REQUIRES_LISTENER", "true");
    let (mut child, admin, read) = run_logged_by(command, empty.path(), &[]);
    let url = format!("http://{admin}/readyz");
    eventually(Duration::from_secs(10), || async {
        try_get(&url, &[]).await.is_some_and(|r| {
            r.status == 503
                && r.text()
                    == "not ready: serving no listener: there is no Gateway in the configuration\n"
        })
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        read().contains("/readyz says 503 until one is served")
    })
    .await;
    assert!(terminate(&mut child).success());
}

/// A listener left unserved (an HTTPS listener whose Secret is missing) is logged, once, with
/// its Gateway, name and reason; the other listener serves.
#[tokio::test]
async fn a_listener_left_unserved_is_warned() {
    let dir = tempfile::tempdir().unwrap();
    let (http, https) = (free_port(), free_port());
    std::fs::write(
        dir.path().join("gw.yaml"),
        format!(
            "{}    - {{name: https, protocol: HTTPS, port: {https}, tls: {{certificateRefs: [{{name: missing}}]}}}}\n",
            gateway(http)
        ),
    )
    .unwrap();
    let (mut child, _admin, read) = run_logged(dir.path(), &[]);
    eventually(Duration::from_secs(10), || async {
        read().contains(" ready ")
    })
    .await;
    assert!(terminate(&mut child).success());
    let log = read();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("listener not served"))
        .collect();
    let [line] = warned.as_slice() else {
        panic!("{log}")
    };
    assert!(
        line.contains("WARN") && line.contains("default/gw") && line.contains("listener=https"),
        "{line}"
    );
    assert!(
        line.contains("missing"),
        "the reason names the Secret: {line}"
    );
}

/// A reload that fails logs the whole reason: for broken YAML, that it is not YAML and why.
#[tokio::test]
async fn a_failed_reload_logs_the_whole_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gw.yaml"), gateway(free_port())).unwrap();
    let (mut child, _admin, read) = run_logged(dir.path(), &[]);
    eventually(Duration::from_secs(10), || async {
        read().contains(" ready ")
    })
    .await;
    std::fs::write(
        dir.path().join("gw.yaml"),
        "kind: Gateway\nspec: [unclosed\n",
    )
    .unwrap();
    eventually(Duration::from_secs(10), || async {
        read().contains("reload failed")
    })
    .await;
    assert!(terminate(&mut child).success());
    let log = read();
    let line = log.lines().find(|l| l.contains("reload failed")).unwrap();
    let reason = line.split_once("invalid YAML: ").map(|(_, r)| r);
    assert!(
        reason.is_some_and(|r| r.trim().len() > 10),
        "no reason in: {line}"
    );
}

/// `/readyz` says why it is 503: here, the port the Gateway wants is taken.
#[tokio::test]
async fn readyz_says_why_it_is_not_ready() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gw.yaml"), gateway(port)).unwrap();
    let (mut child, admin, _read) = run_logged(dir.path(), &[]);
    let url = format!("http://{admin}/readyz");
    let want = format!("not ready: cannot listen on 127.0.0.1:{port} (");
    eventually(Duration::from_secs(10), || async {
        try_get(&url, &[])
            .await
            .is_some_and(|r| r.status == 503 && r.text().starts_with(&want))
    })
    .await;
    assert!(terminate(&mut child).success());
}

/// A port that is taken is retried under the address pier tried (`--listen-host` and the
/// port), not `*:PORT`; and a run on loopback does not claim to listen on all interfaces.
#[tokio::test]
async fn a_taken_port_is_retried_naming_the_address_tried() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gw.yaml"), gateway(port)).unwrap();
    let (mut child, _admin, read) = run_logged(dir.path(), &[]);
    eventually(Duration::from_secs(10), || async {
        read().contains("cannot bind listener port")
    })
    .await;
    assert!(terminate(&mut child).success());
    let log = read();
    let line = log
        .lines()
        .find(|l| l.contains("cannot bind listener port"))
        .unwrap();
    assert!(
        line.contains(&format!("address=127.0.0.1:{port}")),
        "{line}"
    );
    assert!(line.contains("retrying every 2 s"), "{line}");
    assert!(!line.contains("*:"), "{line}");
    assert!(!log.contains("all interfaces"), "{log}");
}

/// `pier run --manifests` with the default `--listen-host` serves every interface: one INFO
/// line says so and how to stay local, and each port's line names the address bound.
#[tokio::test]
async fn run_on_all_interfaces_says_so_and_how_to_stay_local() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("gw.yaml"), gateway(port)).unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let log = run_until_ready(dir.path(), &["--admin", &admin], " ready ").await;
    let note = log
        .lines()
        .find(|l| l.contains("all interfaces"))
        .unwrap_or_else(|| panic!("no line about all interfaces in {log}"));
    assert!(note.contains("INFO"), "{note}");
    assert!(
        note.contains("--listen-host 127.0.0.1 keeps them local"),
        "{note}"
    );
    assert!(note.contains("address=0.0.0.0"), "{note}");
    assert!(
        log.contains(&format!("listening address=0.0.0.0 port={port}")),
        "{log}"
    );
}

/// An API server that cannot be reached: a few lines naming its URL, not one per kind and
/// request; and no claim of serving a last good configuration when none ever loaded.
#[tokio::test]
async fn an_unreachable_api_server_is_reported_briefly_with_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let server = format!("https://127.0.0.1:{}", free_port());
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\"}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let log_path = dir.path().join("stderr.log");
    let mut child = Child(
        pier()
            .args([
                "run",
                "--listen-host",
                "127.0.0.1",
                "--admin",
                "127.0.0.1:0",
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env_remove("RUST_LOG")
            .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
            .spawn()
            .unwrap(),
    );
    // Watches retry from 0.5 s, doubling up to 5 s: several rounds of failures.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(terminate(&mut child).success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    let problems: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    // The API server once, the status-writer Lease once.
    assert!(problems.len() <= 3, "{log}");
    let unreachable = problems
        .iter()
        .find(|l| l.contains("cannot reach the Kubernetes API server"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(unreachable.contains(&server), "{unreachable}");
    assert!(!log.contains("last good configuration"), "{log}");
}

/// CPU time (user + system) the process has used so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// One worker (the current-thread runtime, spinning up to `PIER_IDLE_SPIN_US` before it sleeps)
/// serves, and rests once the requests stop: the spin must not keep the core busy.
#[tokio::test]
async fn one_worker_serves_and_rests_when_idle() {
    let (mut child, port, _echo, _dir) =
        run_one_route(&[("PIER_WORKER_THREADS", "1"), ("PIER_IDLE_SPIN_US", "50")]).await;
    for _ in 0..100 {
        let r = get(&format!("http://127.0.0.1:{port}/"), &[]).await;
        assert_eq!(r.backend(), "a");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu_ticks(child.0.id());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(child.0.id()) - before;
    // A spin that never rests would use about 200 ticks (two seconds of a core).
    assert!(used < 20, "idle pier used {used} ticks of CPU in 2 s");
    assert!(terminate(&mut child).success());
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    names.sort();
    names
}

/// Several workers: thread per core by default (a runtime per worker thread, each with its own
/// listening socket), one work-stealing runtime with `PIER_WORK_STEALING=1`.
#[tokio::test]
async fn several_workers_run_thread_per_core_unless_work_stealing_is_asked_for() {
    for (stealing, per_core) in [("", true), ("1", false)] {
        let (mut child, port, _echo, _dir) = run_one_route(&[
            ("PIER_WORKER_THREADS", "2"),
            ("PIER_WORK_STEALING", stealing),
        ])
        .await;
        for _ in 0..20 {
            let r = get(&format!("http://127.0.0.1:{port}/"), &[]).await;
            assert_eq!(r.backend(), "a");
        }
        let names = thread_names(child.0.id());
        let workers: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with("pier-worker"))
            .collect();
        if per_core {
            assert_eq!(workers, ["pier-worker-0", "pier-worker-1"], "{names:?}");
        } else {
            assert!(workers.is_empty(), "{names:?}");
        }
        assert!(terminate(&mut child).success());
    }
}

/// `pier run` starts one jemalloc purging thread (an idle gateway gives memory back on a
/// timer, not only when it allocates again), unless `_RJEM_MALLOC_CONF` chooses otherwise.
#[cfg(feature = "jemalloc")]
#[tokio::test]
async fn run_purges_freed_memory_in_one_background_thread() {
    for (conf, threads) in [("", 1), ("background_thread:false", 0)] {
        let (mut child, port, _echo, _dir) = run_one_route(&[("_RJEM_MALLOC_CONF", conf)]).await;
        let r = get(&format!("http://127.0.0.1:{port}/"), &[]).await;
        assert_eq!(r.backend(), "a");
        let names = thread_names(child.0.id());
        let purgers = names.iter().filter(|n| *n == "jemalloc_bg_thd").count();
        assert_eq!(purgers, threads, "{conf:?}: {names:?}");
        assert!(terminate(&mut child).success());
    }
}

/// The URLs `pier demo` prints on its first two lines: the quickstart, the meshed Gateway,
/// the gRPC listener, the meshed gRPC listener, and the admin server (`host:port` each).
fn demo_addresses(stdout: std::process::ChildStdout) -> [String; 5] {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut text = String::new();
    for _ in 0..2 {
        text.push_str(&lines.next().unwrap().unwrap());
        text.push('\n');
    }
    let urls: Vec<String> = text
        .split("http://")
        .skip(1)
        .map(|s| {
            s.chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                .collect()
        })
        .collect();
    // serving {base} (admin: {admin}) / also: meshed {mesh}, gRPC {grpc}, meshed gRPC {mesh_grpc}
    let [base, admin, mesh, grpc, mesh_grpc] = urls.try_into().unwrap_or_else(|u| panic!("{u:?}"));
    [base, mesh, grpc, mesh_grpc, admin]
}

/// The demo on ports of its own choosing (`--port 0`, as tests must never take fixed ports),
/// so that a `pier demo` left running (the README's first step) does not break the tests.
/// Its stdout is closed after the first two lines: the demo keeps serving.
#[tokio::test]
async fn demo_serves_the_quickstart() {
    let mut child = Child(
        pier()
            .args([
                "demo",
                "--port",
                "0",
                "--backend-port",
                "0",
                "--admin",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let [base, mesh, grpc, mesh_grpc, admin] =
        tokio::task::spawn_blocking(move || demo_addresses(stdout))
            .await
            .unwrap();
    let port = |a: &str| a.rsplit_once(':').unwrap().1.parse::<u16>().unwrap();
    let (grpc, mesh_grpc) = (port(&grpc), port(&mesh_grpc));
    // It prints once it serves.
    assert_eq!(
        get(&format!("http://{admin}/readyz"), &[]).await.status,
        200
    );
    let url = |path: &str| format!("http://{base}{path}");
    assert_eq!(get(&url("/a"), &[]).await.backend(), "echo-a");
    assert_eq!(
        get(&url("/b"), &[]).await.echo().headers["x-demo"][0],
        "added-by-pier"
    );
    assert_eq!(
        get(&url("/api"), &[("x-version", "2")]).await.backend(),
        "echo-c"
    );
    assert_eq!(
        get(&url("/"), &[("host", "c.example.com")]).await.backend(),
        "echo-c"
    );
    let r = get(&url("/old/x"), &[]).await;
    assert_eq!(r.status, 301);
    assert_eq!(r.headers["location"], url("/a/x").as_str());
    // The meshed Gateway: the workload only speaks mTLS and saw pier's client certificate.
    let meshed = get(&format!("http://{mesh}/"), &[]).await.echo();
    assert_eq!(meshed.backend, "echo-mesh");
    assert!(meshed.client_certificate_verified, "{meshed:?}");
    // The GRPCRoutes, called by a real gRPC client (grpcio): by method with a header filter,
    // by service, no route (UNIMPLEMENTED from pier), and the meshed one over mTLS.
    let call = |port: u16, rpc: &'static str| async move {
        let r = support::grpc::call(([127, 0, 0, 1], port).into(), "demo", rpc, "").await;
        match r["responses"][0].as_str() {
            Some(json) => serde_json::from_str::<pier::echo::EchoRequest>(json).unwrap(),
            None => panic!("{rpc}: {r}"),
        }
    };
    let hello = call(grpc, "demo.Echo/Hello").await;
    assert_eq!(hello.backend, "echo-a");
    assert_eq!(hello.headers["x-demo"][0], "grpc-added-by-pier");
    assert_eq!(call(grpc, "demo.Echo/Other").await.backend, "echo-b");
    let none = support::grpc::call(([127, 0, 0, 1], grpc).into(), "demo", "x.Y/Z", "").await;
    assert_eq!(none["code"], "UNIMPLEMENTED", "{none}");
    let meshed = call(mesh_grpc, "demo.Echo/Hello").await;
    assert_eq!(meshed.backend, "echo-mesh");
    assert!(meshed.client_certificate_verified, "{meshed:?}");
    assert!(terminate(&mut child).success());
}

/// A busy port: the demo says which and how to choose others, and exits, instead of printing
/// that it serves URLs that do not answer.
#[test]
fn demo_on_a_busy_port_fails_naming_it_and_the_flag() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = pier()
        .args(["demo", "--port", &port, "--backend-port", "0"])
        .args(["--admin", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")) && stderr.contains("--port"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("serving"),
        "{out:?}"
    );
}

#[test]
fn crds_prints_the_crds_pier_reads() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    for (args, mesh) in [(&["crds"][..], false), (&["crds", "--mesh"], true)] {
        let out = pier().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let crds: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text).unwrap();
        assert_eq!(crds, pier::crds::bundle(mesh), "{args:?}");
        let own: Vec<_> = crds[crds.len() - 3..]
            .iter()
            .map(|c| c.metadata.name.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(
            own,
            [
                "securitypolicies.pier.dev",
                "backendtrafficpolicies.pier.dev",
                "clienttrafficpolicies.pier.dev"
            ],
            "pier's own CRDs come last"
        );
        let gateway = crds
            .iter()
            .find(|c| c.spec.names.kind == "Gateway")
            .unwrap();
        let has_mesh = serde_json::to_value(gateway).unwrap()["spec"]["versions"][0]["schema"]
            ["openAPIV3Schema"]["properties"]["spec"]["properties"]
            .get("mesh")
            .is_some();
        assert_eq!(has_mesh, mesh);
    }
}

/// `pier crds | head`: the reader closes the pipe early; pier stops writing and exits 0, as a
/// Unix filter does, instead of panicking (exit 101).
#[test]
fn crds_into_a_pipe_closed_early_exits_cleanly() {
    use std::io::Read;
    let mut child = pier()
        .arg("crds")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // The CRDs are several hundred KiB, far more than a pipe holds: pier is still writing.
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Every flag of every subcommand has a help text, and `--help` lists the environment
/// variables pier reads.
#[test]
fn help_documents_every_flag_and_the_environment() {
    use clap::CommandFactory;
    let mut missing = vec![];
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if arg.get_help().is_none() && arg.get_long().is_some() {
                missing.push(format!("{path} --{}", arg.get_long().unwrap()));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    walk(&pier::cli::Cli::command(), "pier", &mut missing);
    assert!(missing.is_empty(), "flags without help: {missing:?}");
    for args in [&["--help"][..], &["run", "--help"]] {
        let out = pier().args(args).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        for var in [
            "RUST_LOG",
            "PIER_WORKER_THREADS",
            "PIER_WORK_STEALING",
            "PIER_IDLE_SPIN_US",
            "_RJEM_MALLOC_CONF",
        ] {
            assert!(help.contains(var), "{var} not in `pier {args:?}`: {help}");
        }
    }
}

#[test]
fn run_takes_exactly_one_source() {
    let out = pier().args(["run"]).output().unwrap();
    assert!(!out.status.success());
    let both = pier()
        .args([
            "run",
            "--manifests",
            "config/examples/quickstart",
            "--kubeconfig",
            "k",
        ])
        .output()
        .unwrap();
    assert!(!both.status.success());
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
    let missing = pier()
        .args([
            "run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--admin",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    // One sentence: the path once, unquoted, and the cause once.
    assert!(
        stderr.contains(
            "error: cannot read kubeconfig /nonexistent/kubeconfig: No such file or directory"
        ),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("/nonexistent/kubeconfig").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn runtime_environment_variables_are_checked_before_anything_starts() {
    for (var, value, expect) in [
        ("PIER_IDLE_SPIN_US", "fast", "PIER_IDLE_SPIN_US must be"),
        ("PIER_IDLE_SPIN_US", "20000", "from 0 to 10000"),
        ("PIER_WORKER_THREADS", "0", "PIER_WORKER_THREADS must be"),
        (
            "PIER_WORK_STEALING",
            "2",
            "PIER_WORK_STEALING must be 0 or 1",
        ),
    ] {
        let out = pier()
            .env(var, value)
            .args(["check", "--manifests", "config/examples/quickstart"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{var}={value}: {stderr}");
        assert!(stderr.contains(expect), "{var}={value}: {stderr}");
    }
    // Off (0) and the default both run.
    for value in ["0", ""] {
        let out = pier()
            .env("PIER_IDLE_SPIN_US", value)
            .args(["check", "--manifests", "config/examples/quickstart"])
            .output()
            .unwrap();
        assert!(out.status.success(), "PIER_IDLE_SPIN_US={value:?}: {out:?}");
    }
}

/// An `https://` OTLP endpoint is verified against the host's roots; with none to read, pier
/// refuses to start rather than export unverified.
#[test]
fn an_https_otlp_endpoint_without_trusted_roots_stops_pier_at_start() {
    let dir = tempfile::tempdir().unwrap();
    // Killed on drop if it starts after all.
    let mut child = Child(
        pier()
            .env("SSL_CERT_FILE", dir.path().join("none.pem"))
            .env("SSL_CERT_DIR", dir.path().join("none"))
            .args([
                "run",
                "--manifests",
                "config/examples/quickstart",
                "--listen-host",
                "127.0.0.1",
                "--admin",
                "127.0.0.1:0",
                "--otlp-endpoint",
                "https://127.0.0.1:9",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + BOUND;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pier started with no trusted roots"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("no trusted root certificates") && stderr.contains("--otlp-ca-file"),
        "{stderr}"
    );
}

// === zero-downtime restart ===

/// An HTTP/1.1 client sending requests back to back until `stop`, on a keep-alive connection
/// (reconnecting after a `Connection: close` answer), or with `close_each` on a new
/// connection per request. Every failed request (no connection, a connection closed before
/// the answer, a status other than 200) is recorded.
async fn http_client(
    port: u16,
    close_each: bool,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ok: std::sync::Arc<std::sync::atomic::AtomicU64>,
    failures: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use hyper::client::conn::http1;
    use std::sync::atomic::Ordering;
    let fail = |what: String| failures.lock().unwrap().push(what);
    let mut sender: Option<http1::SendRequest<http_body_util::Empty<bytes::Bytes>>> = None;
    while !stop.load(Ordering::Relaxed) {
        if sender.is_none() {
            let tcp = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                Ok(t) => t,
                Err(e) => {
                    fail(format!("connect: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let (s, conn) = http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .unwrap();
            tokio::spawn(conn);
            sender = Some(s);
        }
        let s = sender.as_mut().unwrap();
        let mut req = http::Request::get("/").header("host", "restart.example");
        if close_each {
            req = req.header("connection", "close");
        }
        let req = req.body(http_body_util::Empty::new()).unwrap();
        match s.send_request(req).await {
            Ok(resp) => {
                let close = resp
                    .headers()
                    .get("connection")
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
                let status = resp.status();
                let body = http_body_util::BodyExt::collect(resp.into_body()).await;
                if status != 200 || body.is_err() {
                    fail(format!("status {status}, body {:?}", body.err()));
                } else {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
                if close || status != 200 {
                    sender = None;
                }
            }
            Err(e) => {
                fail(format!("request: {e}"));
                sender = None;
            }
        }
    }
}

/// Twenty restarts under load (keep-alive clients, and clients with a new connection per
/// request) lose no request: each time a new `pier run --reuse-port` binds
/// the same port beside the running one and becomes ready, then the old one gets SIGTERM and
/// drains (its idle keep-alive connections get `Connection: close` on their next request).
/// Connections per request need the sysctl `net.ipv4.tcp_migrate_req=1` (queued connections
/// of a closing listener move to the new one), which the test sets in its own network
/// namespace (scripts/test runs the tests in one as root); without it, only keep-alive
/// clients run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_restarts_under_load_lose_no_request() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    const MIGRATE: &str = "/proc/sys/net/ipv4/tcp_migrate_req";
    if std::env::var_os("PIER_TEST_NETNS").is_some() {
        std::fs::write(MIGRATE, "1").expect("set tcp_migrate_req in the test's network namespace");
    }
    // Without the sysctl (not root: the host's namespace) a connection waiting in the old
    // listener's accept queue when it closes is reset, so only keep-alive clients run then.
    let migrate = std::fs::read_to_string(MIGRATE).unwrap().trim() == "1";
    if !migrate {
        eprintln!(
            "net.ipv4.tcp_migrate_req is 0 here: keep-alive clients only (run as root through \
             scripts/test for clients with a connection per request too)"
        );
    }
    let (_echo, dir, port) = one_route().await;
    let mut old = start_pier(dir.path(), free_port(), &[], &["--reuse-port"]).await;

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    // 12 keep-alive clients and 4 that open a connection per request.
    let clients: Vec<_> = (0..16)
        .map(|i| {
            tokio::spawn(http_client(
                port,
                migrate && i % 4 == 0,
                stop.clone(),
                ok.clone(),
                failures.clone(),
            ))
        })
        .collect();
    for restart in 0..20 {
        let before = ok.load(Ordering::Relaxed);
        let new = start_pier(dir.path(), free_port(), &[], &["--reuse-port"]).await;
        let status = terminate(&mut old);
        assert!(
            status.success(),
            "restart {restart}: the old pier exited {status}"
        );
        old = new;
        // The new one serves on its own before the next restart.
        eventually(Duration::from_secs(10), || {
            let ok = ok.clone();
            async move { ok.load(Ordering::Relaxed) > before + 100 }
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let served = ok.load(Ordering::Relaxed);
    let failures = failures.lock().unwrap();
    eprintln!("20 restarts: {served} requests, {} failed", failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} requests failed across 20 restarts: {:?}",
        failures.len(),
        served + failures.len() as u64,
        &failures[..failures.len().min(10)]
    );
    assert!(served > 2000, "{served} requests");
    drop(old);
}

/// SIGHUP (`systemctl reload`) re-reads the manifests at once and does not end pier.
#[tokio::test]
async fn sighup_rereads_the_configuration_and_pier_keeps_serving() {
    let (_echo, dir, port) = one_route().await;
    let admin = free_port();
    let mut child = start_pier(dir.path(), admin, &[], &[]).await;
    let generation = || async move {
        get(&format!("http://127.0.0.1:{admin}/config"), &[])
            .await
            .json()["generation"]
            .as_u64()
            .unwrap()
    };
    let before = generation().await;
    for _ in 0..3 {
        let _ = Command::new("kill")
            .args(["-HUP", &child.0.id().to_string()])
            .status();
    }
    eventually(Duration::from_secs(10), || async move {
        generation().await > before
    })
    .await;
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "pier ended on SIGHUP"
    );
    let r = get(&format!("http://127.0.0.1:{port}/"), &[]).await;
    assert_eq!(r.status, 200);
    assert!(terminate(&mut child).success());
}

/// pier raises its soft open-files limit to the hard one at start-up (a shell's soft limit of
/// 1024 would refuse connections far below `--max-connections`), and warns when even the hard
/// limit is below the connection cap.
#[tokio::test]
async fn run_raises_the_open_files_limit_and_warns_when_the_cap_needs_more() {
    let hard: u64 = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .unwrap()
        .parse()
        .unwrap_or(u64::MAX);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gw.yaml"), gateway(free_port())).unwrap();
    // A soft limit of 256, and a cap beyond the hard limit.
    let cap = hard.saturating_add(1).min(u64::from(u32::MAX)).to_string();
    let mut limited = Command::new("sh");
    limited
        .args(["-c", r#"ulimit -Sn 256 && exec "$0" "$@""#])
        .arg(env!("CARGO_BIN_EXE_pier"));
    let args = ["--max-connections", &cap];
    let (child, _admin, read) = run_logged_by(limited, dir.path(), &args);
    eventually(Duration::from_secs(10), || async {
        read().contains("ready")
    })
    .await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.0.id())).unwrap();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap();
    let want = if hard == u64::MAX {
        "unlimited".to_string()
    } else {
        hard.to_string()
    };
    assert_eq!(soft, want, "{limits}");
    let text = read();
    assert!(
        text.contains("the open-files limit is below what --max-connections needs"),
        "{text}"
    );
}

/// `pier run --help` groups its flags under headings (issue 42): each flag under the heading of
/// what it is for, not one flat list.
#[test]
fn run_help_groups_its_flags_under_headings() {
    let out = pier().args(["run", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let under = flags_by_heading(&help);
    for (flag, expected) in [
        ("manifests", "Source"),
        ("lease-name", "Cluster mode (--kubeconfig)"),
        ("listen-host", "Listeners and TLS"),
        ("trusted-proxies", "Listeners and TLS"),
        ("admin", "Admin"),
        ("gateway", "Gateways"),
        ("advertise-address", "Gateways"),
        ("client-cert", "Mesh identity"),
        ("spiffe-socket", "Mesh identity"),
        ("access-log", "Observability"),
        ("otlp-endpoint", "Observability"),
        ("max-connections", "Limits and timeouts"),
        ("max-manifest-bytes", "Manifests (--manifests)"),
    ] {
        assert_eq!(
            under.get(flag).map(String::as_str),
            Some(expected),
            "--{flag} in:\n{help}"
        );
    }
}

/// The flags a `--help` lists (long names), by the heading they are under.
fn flags_by_heading(help: &str) -> std::collections::BTreeMap<String, String> {
    let mut heading = "";
    let mut under = std::collections::BTreeMap::new();
    for line in help.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            heading = line.trim_end_matches(':');
            continue;
        }
        // A flag's own line (`      --name`, `  -o, --output`); its description lines are
        // indented further.
        let flag = line.strip_prefix("      --").or_else(|| {
            line.strip_prefix("  -")
                .and_then(|l| l.split_once(", --"))
                .map(|(_, f)| f)
        });
        if let Some(flag) = flag {
            let name = flag.split([' ', '=']).next().unwrap_or_default();
            under.insert(name.to_string(), heading.to_string());
        }
    }
    under
}

/// Value placeholders share one style (issue 42): upper case, one name a kind of value, lists
/// as `X[,...]`.
const PLACEHOLDERS: &[&str] = &[
    "BYTES",
    "CIDR[,...]",
    "DIR",
    "DOMAIN",
    "FIELD[,...]",
    "FILE",
    "FORMAT",
    "ID",
    "IP",
    "IP:PORT",
    "IP[,...]",
    "IP|CIDR[,...]",
    "MS",
    "N",
    "NAME",
    "NS",
    "NS/NAME",
    "PATH",
    "PORT",
    "RATIO",
    "SECS",
    "SELECTOR",
    "URL",
];

/// `pier check --help` lists no flag of serving only (the Lease's name and holder, listeners,
/// the admin server) and no "serve" wording (issue 42); and every subcommand's value
/// placeholders, as declared and as `--help` prints them, are from [`PLACEHOLDERS`].
#[test]
fn check_help_has_no_serving_flags_and_placeholders_share_one_style() {
    let out = pier().args(["check", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let flags = flags_by_heading(&help);
    for serving in [
        "lease-name",
        "lease-identity",
        "listen-host",
        "admin",
        "probe-interval",
        "ready-requires-listener",
    ] {
        assert!(!flags.contains_key(serving), "--{serving} in:\n{help}");
    }
    for kept in [
        "manifests",
        "kubeconfig",
        "gateway",
        "no-status",
        "lease-namespace",
        "secret-field-selector",
        "client-cert",
    ] {
        assert!(flags.contains_key(kept), "no --{kept} in:\n{help}");
    }
    assert!(!help.contains("Serve"), "{help}");

    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, found: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if !arg.get_action().takes_values() {
                continue;
            }
            match arg.get_value_names() {
                None => found.push(format!("{path} --{}: no value name", arg.get_id())),
                Some(names) => found.extend(
                    names
                        .iter()
                        .filter(|n| !PLACEHOLDERS.contains(&n.as_str()))
                        .map(|n| format!("{path} --{}: {n}", arg.get_id())),
                ),
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), found);
        }
    }
    let mut odd = vec![];
    walk(&pier::cli::Cli::command(), "pier", &mut odd);
    assert!(odd.is_empty(), "placeholders outside the style: {odd:?}");
    for args in [
        &["run", "--help"][..],
        &["check", "--help"],
        &["demo", "--help"],
        &["echo", "--help"],
        &["mesh", "export-trust", "--help"],
        &["crds", "--help"],
    ] {
        let out = pier().args(args).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        // A flag's own line, up to its description: `--admin <IP:PORT>`, `--kubeconfig [<PATH>]`.
        let heads = help
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('-'))
            .map(|l| l.split("  ").next().unwrap_or_default());
        for head in heads {
            for placeholder in head.split('<').skip(1).filter_map(|s| s.split_once('>')) {
                assert!(
                    PLACEHOLDERS.contains(&placeholder.0),
                    "<{}> in `pier {args:?}`: {head}",
                    placeholder.0
                );
            }
        }
    }
}
