//! A real kube-apiserver and etcd for cluster-mode tests, started the way controller-runtime's
//! envtest does: etcd on loopback with `--unsafe-no-fsync`, kube-apiserver bound to
//! 127.0.0.1 with certificates made at test time, RBAC on, no controller-manager.
//!
//! ```text
//! ControlPlane::start() ─> etcd (temp data dir) <─ kube-apiserver (127.0.0.1:<free>)
//!                                                     ^ admin_client(): client cert in system:masters
//!                                                     ^ kubeconfig_for_user / _service_account:
//!                                                       least-privilege identities under RBAC
//! ```
//!
//! The binaries come from `PIER_KUBE_APISERVER` / `PIER_ETCD`, else from the cache that
//! `scripts/control-plane.sh build` fills. If they are missing the test fails (never skips).
//! Start one control plane per test and isolate by namespace; startup takes ~5-30 s on two
//! cores. Without kube-controller-manager there is no garbage collection, no namespace
//! deletion and no default ServiceAccount.
//!
//! Processes are started through `setpriv --pdeathsig KILL`, so they die with the thread that
//! started them even if the test process is killed: call `start`/`start_apiserver` from the
//! test's own task (not a `tokio::spawn`ed one). Drop kills both and removes the temp dir,
//! printing the tail of the logs first if the test is panicking.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Bound for the control plane to come up (or back up). Upstream's integration tests wait up
/// to 60 s; contended two-core machines have needed more.
pub const START_BOUND: Duration = Duration::from_secs(120);
/// Bound for a CRD to be Established and show up in discovery.
pub const CRD_BOUND: Duration = Duration::from_secs(60);

const FIELD_MANAGER: &str = "pier-tests";

/// A running etcd + kube-apiserver. See the module docs.
pub struct ControlPlane {
    apiserver: Option<Proc>,
    etcd: Proc,
    apiserver_bin: PathBuf,
    apiserver_args: Vec<String>,
    port: u16,
    pki: Pki,
    admin_kubeconfig: PathBuf,
    admin_config: kube::Config,
    /// Last, so it is removed after the processes are gone.
    dir: tempfile::TempDir,
}

/// Where the binaries are.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
}

// === impl Binaries ===

impl Binaries {
    /// `PIER_KUBE_APISERVER` / `PIER_ETCD`, else `scripts/control-plane.sh`'s cache directory.
    /// Panics, saying how to build them, if either is missing.
    pub fn find() -> Self {
        let version = Self::version();
        let dir = Self::cache_dir();
        let pick = |var: &str, name: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .unwrap_or_else(|| dir.join(name))
        };
        let bins = Self {
            kube_apiserver: pick("PIER_KUBE_APISERVER", "kube-apiserver"),
            etcd: pick("PIER_ETCD", "etcd"),
        };
        for path in [&bins.kube_apiserver, &bins.etcd] {
            assert!(
                path.is_file(),
                "{} not found: run `scripts/control-plane.sh build` (builds kube-apiserver v{version} \
                 and etcd into {}), or set PIER_KUBE_APISERVER and PIER_ETCD",
                path.display(),
                dir.display(),
            );
        }
        bins
    }

    /// kubectl: `PIER_KUBECTL`, else the one `scripts/control-plane.sh build` puts next to
    /// kube-apiserver (built from the same `k8s.io/kubernetes` module; Debian has no kubectl
    /// package). Panics, saying how to build it, if it is missing.
    pub fn kubectl() -> PathBuf {
        let path = match std::env::var_os("PIER_KUBECTL") {
            Some(p) => PathBuf::from(p),
            None => Self::cache_dir().join("kubectl"),
        };
        assert!(
            path.is_file(),
            "{} not found: run `scripts/control-plane.sh build` (builds kubectl with the control \
             plane), or set PIER_KUBECTL",
            path.display()
        );
        path
    }

    /// `scripts/control-plane.sh`'s directory for the pinned Kubernetes version.
    fn cache_dir() -> PathBuf {
        let cache = std::env::var_os("PIER_CONTROL_PLANE_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").expect("HOME is set");
                Path::new(&home).join(".cache/pier/control-plane")
            });
        cache.join(format!("v{}", Self::version()))
    }

    fn version() -> String {
        std::env::var("PIER_KUBE_VERSION").unwrap_or_else(|_| {
            super::pinned_version(
                include_str!("../../scripts/control-plane.sh"),
                "KUBE_VERSION",
            )
        })
    }
}

// === impl ControlPlane ===

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until the API server is ready and the
    /// `default` namespace exists. Panics (with the logs) on failure.
    pub async fn start() -> Self {
        pier::tls::provider::install_default();
        let started = Instant::now();
        let bins = Binaries::find();
        let dir = tempfile::Builder::new()
            .prefix("pier-control-plane-")
            .tempdir()
            .expect("temp dir");
        let d = dir.path();
        let pki = Pki::new();

        let ca = write(d, "ca.crt", &pki.ca_pem);
        let serving = pki.leaf(
            "kube-apiserver",
            None,
            vec![
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                SanType::DnsName("localhost".try_into().unwrap()),
            ],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let serving_crt = write(d, "serving.crt", &serving.0);
        let serving_key = write(d, "serving.key", &serving.1);
        let sa_key = KeyPair::generate().expect("service-account key");
        let sa_priv = write(d, "sa.key", &sa_key.serialize_pem());
        let sa_pub = write(d, "sa.pub", &sa_key.public_key_pem());

        // etcd
        let (client_port, peer_port) = two_free_ports();
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_args = vec![
            "--name=pier-test".to_string(),
            format!("--data-dir={}", d.join("etcd").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=pier-test={peer_url}"),
            "--unsafe-no-fsync=true".to_string(),
            "--log-level=warn".to_string(),
        ];
        let mut etcd = Proc::spawn("etcd", &bins.etcd, &etcd_args, d.join("etcd.log"));
        wait_etcd(&mut etcd, client_port).await;

        // kube-apiserver
        let port = crate::support::free_port();
        let p = |path: &Path| path.display().to_string();
        let apiserver_args = vec![
            format!("--etcd-servers={client_url}"),
            // Both are needed: with no default route, kube-apiserver cannot pick an address.
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", d.join("apiserver-certs").display()),
            format!("--tls-cert-file={}", p(&serving_crt)),
            format!("--tls-private-key-file={}", p(&serving_key)),
            format!("--client-ca-file={}", p(&ca)),
            "--authorization-mode=RBAC".to_string(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-signing-key-file={}", p(&sa_priv)),
            format!("--service-account-key-file={}", p(&sa_pub)),
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            // No controller-manager creates the `default` ServiceAccount this plugin waits for.
            "--disable-admission-plugins=ServiceAccount".to_string(),
            // The lease reconciler rejects a loopback advertise address for the `kubernetes`
            // Service's endpoints; clients here talk to 127.0.0.1 directly.
            "--endpoint-reconciler-type=none".to_string(),
            "--allow-privileged=true".to_string(),
            // ClusterTrustBundle (mesh trust bundles) is beta and off by default in 1.36.
            "--feature-gates=ClusterTrustBundle=true".to_string(),
            "--runtime-config=certificates.k8s.io/v1beta1/clustertrustbundles=true".to_string(),
        ];

        let (admin_crt, admin_key) = pki.client_cert("pier-test-admin", Some("system:masters"));
        let admin_kubeconfig = write_kubeconfig(
            d,
            "admin",
            port,
            &ca,
            &User::Cert {
                crt: write(d, "admin.crt", &admin_crt),
                key: write(d, "admin.key", &admin_key),
            },
        );
        let admin_config = load_config(&admin_kubeconfig).await;

        let mut cp = Self {
            apiserver: None,
            etcd,
            apiserver_bin: bins.kube_apiserver,
            apiserver_args,
            port,
            pki,
            admin_kubeconfig,
            admin_config,
            dir,
        };
        cp.start_apiserver().await;
        cp.wait_default_namespace().await;
        eprintln!(
            "control plane ready in {:?}: {} ({})",
            started.elapsed(),
            cp.server_url(),
            cp.dir().display()
        );
        cp
    }

    /// A client authenticated as a `system:masters` member (bypasses RBAC).
    pub fn admin_client(&self) -> kube::Client {
        kube::Client::try_from(self.admin_config.clone()).expect("admin client")
    }

    /// A kubeconfig file for the admin identity.
    pub fn kubeconfig_admin(&self) -> PathBuf {
        self.admin_kubeconfig.clone()
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The CA that signed the serving and client certificates, as PEM.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// The temp directory holding certificates, kubeconfigs, etcd data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kubeconfig for user `name` (client certificate, at most one group since a certificate
    /// carries one O here). Without RBAC bindings it can do next to nothing.
    pub fn kubeconfig_for_user(&self, name: &str, group: Option<&str>) -> PathBuf {
        let d = self.dir.path();
        let (crt, key) = self.pki.client_cert(name, group);
        let file = sanitize(name);
        let user = User::Cert {
            crt: write(d, &format!("user-{file}.crt"), &crt),
            key: write(d, &format!("user-{file}.key"), &key),
        };
        write_kubeconfig(
            d,
            &format!("user-{file}"),
            self.port,
            &self.ca_path(),
            &user,
        )
    }

    /// A kubeconfig holding a token for ServiceAccount `namespace/name` (created if absent;
    /// the namespace must exist), from the TokenRequest API. The identity is
    /// `system:serviceaccount:<namespace>:<name>`, so RBAC applies as it would in a cluster.
    pub async fn kubeconfig_for_service_account(&self, namespace: &str, name: &str) -> PathBuf {
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin_client(), namespace);
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        match sas.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create ServiceAccount {namespace}/{name}: {e}"),
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = sas
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
            .status
            .and_then(|s| s.token)
            .expect("TokenRequest returns a token");
        let file = format!("sa-{}-{}", sanitize(namespace), sanitize(name));
        write_kubeconfig(
            self.dir.path(),
            &file,
            self.port,
            &self.ca_path(),
            &User::Token(token),
        )
    }

    /// A token for the existing ServiceAccount `namespace/name`, bound to a new Secret
    /// `namespace/secret`: deleting that Secret revokes the token at once (the API server
    /// checks the bound object on every request), which is how the tests rotate credentials
    /// faster than TokenRequest's 10-minute minimum lifetime.
    pub async fn bound_token(&self, namespace: &str, name: &str, secret: &str) -> String {
        let secrets: Api<Secret> = Api::namespaced(self.admin_client(), namespace);
        let made = secrets
            .create(
                &PostParams::default(),
                &Secret {
                    metadata: ObjectMeta {
                        name: Some(secret.to_string()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create Secret {namespace}/{secret}: {e}"));
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".to_string()),
                    kind: Some("Secret".to_string()),
                    name: Some(secret.to_string()),
                    uid: made.metadata.uid,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin_client(), namespace);
        sas.create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
            .status
            .and_then(|s| s.token)
            .expect("TokenRequest returns a token")
    }

    /// A kubeconfig for this API server whose user is `user`: the lines under `user:`,
    /// indented by four spaces (`    token: ...\n`).
    pub fn kubeconfig_text(&self, user: &str) -> String {
        kubeconfig_text("pier-test-user", self.port, &self.ca_path(), user)
    }

    /// A client from one of the kubeconfigs above.
    pub async fn client_from(&self, kubeconfig: &Path) -> kube::Client {
        kube::Client::try_from(load_config(kubeconfig).await).expect("client from kubeconfig")
    }

    /// Kills kube-apiserver (SIGKILL, like a crash). etcd keeps running.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut p) = self.apiserver.take() {
            p.kill();
        }
    }

    /// Starts kube-apiserver again with the same port, certificates and etcd, and waits for
    /// `/readyz`. A no-op wait if it is already running.
    pub async fn start_apiserver(&mut self) {
        if self.apiserver.is_none() {
            self.apiserver = Some(Proc::spawn(
                "kube-apiserver",
                &self.apiserver_bin,
                &self.apiserver_args,
                self.dir.path().join("kube-apiserver.log"),
            ));
        }
        self.wait_ready().await;
    }

    /// [`stop_apiserver`](Self::stop_apiserver), then [`start_apiserver`](Self::start_apiserver).
    pub async fn restart_apiserver(&mut self) {
        self.stop_apiserver();
        self.start_apiserver().await;
    }

    /// Applies every `*.yaml` / `*.yml` CRD in `dir` (not recursive; a file may hold several
    /// documents), then waits until each is Established and served by discovery.
    /// Returns their names. Panics if two files define the same CRD.
    pub async fn install_crds(&self, dir: impl AsRef<Path>) -> Vec<String> {
        let dir = dir.as_ref();
        let mut files: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.is_file()
                    && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
            .collect();
        files.sort();
        let mut crds: Vec<CustomResourceDefinition> = vec![];
        for file in &files {
            let text = fs::read_to_string(file).unwrap();
            let docs: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: not CRD YAML: {e}", file.display()));
            crds.extend(docs);
        }
        let mut names: Vec<String> = crds
            .iter()
            .map(|c| c.metadata.name.clone().expect("CRD has a name"))
            .collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "{} defines a CRD twice", dir.display());
        self.apply_crds(&crds).await;
        names
    }

    /// Server-side applies `crds` (forcing ownership), then waits until each is Established
    /// and its served versions list the plural in discovery (Established comes first; kube's
    /// docs warn discovery takes longer).
    pub async fn apply_crds(&self, crds: &[CustomResourceDefinition]) {
        let client = self.admin_client();
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        for crd in crds {
            let name = crd.metadata.name.as_deref().expect("CRD has a name");
            api.patch(name, &pp, &Patch::Apply(crd))
                .await
                .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        }
        for crd in crds {
            let name = crd.metadata.name.as_deref().unwrap();
            tokio::time::timeout(
                CRD_BOUND,
                await_condition(api.clone(), name, conditions::is_crd_established()),
            )
            .await
            .unwrap_or_else(|_| panic!("CRD {name} not Established within {CRD_BOUND:?}"))
            .unwrap_or_else(|e| panic!("watch CRD {name}: {e}"));
            for v in crd.spec.versions.iter().filter(|v| v.served) {
                let gv = format!("{}/{}", crd.spec.group, v.name);
                let plural = &crd.spec.names.plural;
                poll(
                    CRD_BOUND,
                    &format!("{plural} in discovery of {gv}"),
                    || async {
                        client
                            .list_api_group_resources(&gv)
                            .await
                            .is_ok_and(|l| l.resources.iter().any(|r| &r.name == plural))
                    },
                )
                .await;
            }
        }
    }

    fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    async fn wait_ready(&mut self) {
        let client = self.admin_client();
        let deadline = Instant::now() + START_BOUND;
        loop {
            if let Some(p) = self.apiserver.as_mut() {
                p.assert_running();
            }
            let req = http::Request::get("/readyz").body(vec![]).unwrap();
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return,
                _ if Instant::now() > deadline => {
                    let log = self.apiserver.as_ref().map(Proc::tail).unwrap_or_default();
                    panic!("kube-apiserver not ready within {START_BOUND:?}; log tail:\n{log}")
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// `/readyz` can pass before the system namespaces controller has run.
    async fn wait_default_namespace(&self) {
        let api: Api<Namespace> = Api::all(self.admin_client());
        poll(START_BOUND, "namespace default", || async {
            api.get_opt("default").await.is_ok_and(|n| n.is_some())
        })
        .await;
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        let tails: Vec<String> = self
            .apiserver
            .iter()
            .chain([&self.etcd])
            .map(|p| format!("--- {} log tail ---\n{}", p.name, p.tail()))
            .collect();
        self.stop_apiserver();
        self.etcd.kill();
        if panicking {
            eprintln!(
                "control plane in {}:\n{}",
                self.dir.path().display(),
                tails.join("\n")
            );
        }
    }
}

/// A child process with its output in a log file. Killed on drop.
pub struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

// === impl Proc ===

impl Proc {
    pub fn spawn(name: &'static str, bin: &Path, args: &[String], log: PathBuf) -> Self {
        Self::spawn_with_env(name, bin, args, &[], log)
    }

    /// [`Proc::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        name: &'static str,
        bin: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> Self {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let err = out.try_clone().unwrap();
        // setpriv (util-linux) makes the kernel kill the child when the spawning thread
        // dies, so a killed test run leaves no etcd or kube-apiserver behind. The crate forbids
        // `unsafe`, which rules out `pre_exec` + prctl.
        let mut cmd = if Path::new(SETPRIV).is_file() {
            let mut c = Command::new(SETPRIV);
            c.args(["--pdeathsig", "KILL", "--"]).arg(bin);
            c
        } else {
            Command::new(bin)
        };
        let child = cmd
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        Self { name, child, log }
    }

    /// Panics with the log tail if the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!(
                "{} exited ({status}); log tail:\n{}",
                self.name,
                self.tail()
            );
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last ~40 lines of the log.
    pub fn tail(&self) -> String {
        let Ok(mut f) = File::open(&self.log) else {
            return String::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(8192)));
        let mut s = String::new();
        let _ = f.read_to_string(&mut s);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

const SETPRIV: &str = "/usr/bin/setpriv";

/// The test CA, and certificates it signs.
struct Pki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

// === impl Pki ===

impl Pki {
    fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "pier-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_pem = params.self_signed(&key).unwrap().pem();
        Self {
            ca_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// (certificate PEM, PKCS#8 key PEM).
    fn leaf(
        &self,
        cn: &str,
        org: Option<&str>,
        sans: Vec<SanType>,
        usage: ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Kubernetes reads the user from CN and a group from O.
    fn client_cert(&self, user: &str, group: Option<&str>) -> (String, String) {
        self.leaf(user, group, vec![], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

enum User {
    Cert { crt: PathBuf, key: PathBuf },
    Token(String),
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Writes `<name>.kubeconfig` in `dir`, referring to certificate files by absolute path.
fn write_kubeconfig(dir: &Path, name: &str, port: u16, ca: &Path, user: &User) -> PathBuf {
    let user = match user {
        User::Cert { crt, key } => format!(
            "    client-certificate: \"{}\"\n    client-key: \"{}\"\n",
            crt.display(),
            key.display()
        ),
        User::Token(token) => format!("    token: \"{token}\"\n"),
    };
    let text = kubeconfig_text(name, port, ca, &user);
    write(dir, &format!("{name}.kubeconfig"), &text)
}

fn kubeconfig_text(name: &str, port: u16, ca: &Path, user: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: pier-test\n  cluster:\n    server: https://127.0.0.1:{port}\n    \
         certificate-authority: \"{ca}\"\n\
         users:\n\
         - name: {name}\n  user:\n{user}\
         contexts:\n\
         - name: pier-test\n  context:\n    cluster: pier-test\n    user: {name}\n\
         current-context: pier-test\n",
        ca = ca.display(),
    )
}

async fn load_config(kubeconfig: &Path) -> kube::Config {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("read {}: {e}", kubeconfig.display()));
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()))
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn two_free_ports() -> (u16, u16) {
    loop {
        let (a, b) = (crate::support::free_port(), crate::support::free_port());
        if a != b {
            return (a, b);
        }
    }
}

/// Waits for etcd's `/health` to say `"health":"true"` (a plain HTTP/1.0 request, to need no
/// HTTP client here).
async fn wait_etcd(etcd: &mut Proc, port: u16) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + START_BOUND;
    loop {
        etcd.assert_running();
        let healthy = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()?;
            s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                .await
                .ok()?;
            let mut body = String::new();
            s.read_to_string(&mut body).await.ok()?;
            Some(body.contains("\"health\":\"true\""))
        };
        if tokio::time::timeout(Duration::from_secs(2), healthy).await == Ok(Some(true)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "etcd not healthy within {START_BOUND:?}; log tail:\n{}",
            etcd.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `check` every 250 ms until it is true; panics after `bound`.
pub async fn poll<F, Fut>(bound: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {bound:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
