"""`make helm-check`: the chart lints and renders; every stage carries probes, resources and a locked-down
security context; the Jobs are hooks; monitoring objects appear only when enabled; the probe and notify stages
appear only when enabled, as exactly one replica, with the webhooks only in the Secret; the rendered
driftline.toml loads in the binary's own config loader; the alert rules pass promtool; a real Prometheus scrapes the running
stages; the Dockerfile is multi-stage and runs unprivileged.

Needs HELM and DRIFTLINE_BIN; the scrape test also Kafka and ClickHouse (KAFKA_BROKERS / CLICKHOUSE_URL, or
the local ones of `make infra-up`)."""

import json
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import tomllib
import urllib.parse
import urllib.request

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "driftline"
PRODUCTION = ["-f", str(CHART / "values-production.example.yaml")]
HELM = os.environ["HELM"]
DRIFTLINE = os.environ["DRIFTLINE_BIN"]
WITH_KEY = [
    "--set", "secrets.apiKeys[0].project=default",
    "--set", "secrets.apiKeys[0].scopes={ingest,read,admin}",
    "--set", "secrets.apiKeys[0].sha256=" + "ab" * 32,
]
STAGES = ["api", "detect", "ingest"]
SINGLE_STAGES = ["notify", "probe", "upstream"]
WEBHOOK_URL = "https://hooks.example.com/services/T0/B0/webhook-token"
WEBHOOK_SECRET = "webhook-signing-secret"
# probe and notify enabled: a Streamable HTTP server with a header, a stdio server, a signed Slack webhook.
SINGLE_VALUES = {
    "probe": {
        "enabled": True,
        "project": "default",
        "intervalSeconds": 30,
        "servers": [
            {"name": "search-mcp", "url": "http://search-mcp.tools:9000/mcp",
             "headers": {"X-Team": 'platform "core"'}},
            {"name": "files", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
             "env": {"LOG_LEVEL": "warn"}, "cwd": "/tmp"},
        ],
    },
    "config": {
        "otlp": {"servers": [{"address": "tools.internal:8080", "server": "search-mcp"},
                             {"address": "https://gw.example/mcp", "server": "gateway"}]},
    },
    "upstream": {
        "enabled": True,
        "image": {"repository": "registry.example/driftline-upstream", "tag": "1.0"},
        "npmIntervalSeconds": 600,
        "packages": [
            {"package": "npm:@modelcontextprotocol/server-filesystem", "server": "files",
             "command": ["mcp-server-filesystem", "/tmp"], "env": {"LOG_LEVEL": "warn"}},
            {"package": "pypi:mcp-server-fetch", "server": "fetch", "versions": "<2"},
            {"package": "mcp-registry:io.github.owner/weather", "server": "weather"},
        ],
    },
    "notify": {
        "enabled": True,
        "publicUrl": "https://driftline.example.com",
        "webhooks": [
            {"url": WEBHOOK_URL, "format": "slack", "minClassification": "breaking", "secret": WEBHOOK_SECRET,
             "projects": ["default"]},
        ],
    },
}


def render(*args):
    result = subprocess.run([HELM, "template", "rel", str(CHART), *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(docs, kind):
    return [doc for doc in docs if doc["kind"] == kind]


def names(docs):
    return sorted(doc["metadata"]["name"] for doc in docs)


def single_values(directory):
    """`-f` with SINGLE_VALUES (lists and maps are clearer in a values file than in --set)."""
    path = directory / "single-stages.yaml"
    path.write_text(yaml.safe_dump(SINGLE_VALUES))
    return ["-f", str(path)]


def test_the_chart_lints_with_default_and_production_values(tmp_path):
    for values in ([], PRODUCTION, single_values(tmp_path)):
        result = subprocess.run([HELM, "lint", "--strict", str(CHART), *values], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_stage_has_probes_resources_and_a_locked_down_security_context():
    for values in ([], PRODUCTION):
        deployments = of_kind(render(*values), "Deployment")
        assert names(deployments) == [f"rel-driftline-{stage}" for stage in STAGES]
        for deployment in deployments:
            pod = deployment["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] != 0
            assert pod["automountServiceAccountToken"] is False
            for container in pod["containers"]:
                assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
                assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
                context = container["securityContext"]
                assert context["readOnlyRootFilesystem"] is True
                assert context["allowPrivilegeEscalation"] is False
                assert context["capabilities"]["drop"] == ["ALL"]
                assert container["resources"]["requests"] and container["resources"]["limits"]
                assert container["args"][0] in STAGES
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            # Scraped through pod annotations by default; the production example uses a ServiceMonitor.
            assert annotations.get("prometheus.io/scrape") == ("true" if not values else None)


def test_autoscaling_for_ingest_and_api_and_disruption_budgets_for_every_stage():
    docs = render()
    assert names(of_kind(docs, "HorizontalPodAutoscaler")) == ["rel-driftline-api", "rel-driftline-ingest"]
    assert names(of_kind(docs, "PodDisruptionBudget")) == [f"rel-driftline-{stage}" for stage in STAGES]
    assert names(of_kind(docs, "Service")) == [f"rel-driftline-{stage}" for stage in STAGES]
    detect = next(d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("detect"))
    assert detect["spec"]["replicas"] == 2
    env = {e["name"]: e for e in detect["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DRIFTLINE__KAFKA__INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_migrate_and_topics_jobs_run_before_install_and_upgrade():
    docs = render()
    jobs = of_kind(docs, "Job")
    assert names(jobs) == ["rel-driftline-migrate", "rel-driftline-topics"]
    for job in jobs:
        annotations = job["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:2] in (["migrate", "--config"], ["topics", "create"])
    # What the Jobs mount exists before them.
    for kind in ("ConfigMap", "Secret"):
        [doc] = of_kind(docs, kind)
        assert doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert int(doc["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
            jobs[0]["metadata"]["annotations"]["helm.sh/hook-weight"]
        )


def test_service_monitor_and_alert_rules_only_when_enabled():
    docs = render()
    assert not of_kind(docs, "ServiceMonitor") and not of_kind(docs, "PrometheusRule")
    docs = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true")
    [monitor] = of_kind(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    [rule] = of_kind(docs, "PrometheusRule")
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts == {
        "DriftlineBreakingDrift",
        "DriftlineSecurityFlag",
        "DriftlineDeclaredOutputMismatch",
        "DriftlineConsumerLagGrowing",
        "DriftlineDetectionStale",
        "DriftlineNotificationsFailing",
        "DriftlineDeadLetters",
        "DriftlineIngest5xx",
        "DriftlineUpstreamWatcherStopped",
        "DriftlineUpstreamSandboxUnavailable",
    }


def rendered_config(directory, *values):
    docs = render(*values)
    [config_map] = of_kind(docs, "ConfigMap")
    secrets = of_kind(docs, "Secret")
    keys = directory / "keys.toml"
    if secrets:
        keys.write_text(secrets[0]["stringData"]["keys.toml"])
        # With notify.enabled the Secret also holds the webhooks that driftline.toml names as notify.webhooks_file.
        if "webhooks.toml" in secrets[0]["stringData"]:
            (directory / "webhooks.toml").write_text(secrets[0]["stringData"]["webhooks.toml"])
    else:
        # secrets.existingSecret: the operator's Secret holds keys.toml in the same form.
        keys.write_text('[[keys]]\nproject = "default"\nscopes = ["ingest", "read"]\nsha256 = "' + "cd" * 32 + '"\n')
    config = directory / "driftline.toml"
    # The Secret's files (keys.toml, webhooks.toml) are mounted at /etc/driftline/secret; here they are next to it.
    config.write_text(config_map["data"]["driftline.toml"].replace("/etc/driftline/secret/", f"{directory}/"))
    return config


def check_config(config, stage):
    return subprocess.run(
        [DRIFTLINE, "check-config", "--config", str(config), "--stage", stage], capture_output=True, text=True
    )


def test_the_rendered_configuration_loads_in_driftline():
    with tempfile.TemporaryDirectory() as tmp:
        for values in ([*WITH_KEY], [*PRODUCTION, *WITH_KEY]):
            config = rendered_config(pathlib.Path(tmp), *values)
            for stage in STAGES:
                result = check_config(config, stage)
                assert result.returncode == 0, f"{stage}: {result.stderr}"
                assert "configuration ok" in result.stdout
        # Without API keys the stages that serve data refuse to listen beyond loopback, and say why.
        config = rendered_config(pathlib.Path(tmp))
        assert check_config(config, "detect").returncode == 0
        result = check_config(config, "ingest")
        assert result.returncode == 2 and "no API keys" in result.stderr, result.stderr


def test_probe_and_notify_are_off_by_default():
    for values in ([], PRODUCTION):
        docs = render(*values)
        for kind in ("Deployment", "Service"):
            assert not [d for d in names(of_kind(docs, kind)) if d.rsplit("-", 1)[1] in SINGLE_STAGES]
        [config_map] = of_kind(docs, "ConfigMap")
        assert "[probe]" not in config_map["data"]["driftline.toml"]
        assert "[notify]" not in config_map["data"]["driftline.toml"]
        assert "upstream" not in config_map["data"]["driftline.toml"]
        assert not of_kind(docs, "NetworkPolicy")
        for secret in of_kind(docs, "Secret"):
            assert "webhooks.toml" not in secret["stringData"]


def test_probe_and_notify_run_as_exactly_one_replica(tmp_path):
    # Even where someone sets replicas, autoscaling or a disruption budget for them: a second prober would probe
    # every server twice, a second notifier send every notification twice.
    overrides = []
    for stage in SINGLE_STAGES:
        overrides += ["--set", f"{stage}.replicas=3", "--set", f"{stage}.autoscaling.enabled=true",
                      "--set", f"{stage}.autoscaling.minReplicas=2", "--set", f"{stage}.autoscaling.maxReplicas=4",
                      "--set", f"{stage}.podDisruptionBudget.enabled=true",
                      "--set", f"{stage}.podDisruptionBudget.minAvailable=1"]
    for extra in ([], overrides):
        docs = render(*single_values(tmp_path), *WITH_KEY, *extra)
        deployments = of_kind(docs, "Deployment")
        assert names(deployments) == [f"rel-driftline-{stage}" for stage in sorted(STAGES + SINGLE_STAGES)]
        for stage in SINGLE_STAGES:
            [deployment] = [d for d in deployments if d["metadata"]["name"] == f"rel-driftline-{stage}"]
            assert deployment["spec"]["replicas"] == 1
            assert deployment["spec"]["strategy"] == {"type": "Recreate"}
            assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == stage
            pod = deployment["spec"]["template"]["spec"]
            [container] = pod["containers"]
            assert container["args"] == [stage, "--config", "/etc/driftline/driftline.toml"]
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["resources"]["requests"] and container["resources"]["limits"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert pod["securityContext"]["runAsNonRoot"] is True
        # No autoscaler or disruption budget for them; the other stages keep theirs.
        assert names(of_kind(docs, "HorizontalPodAutoscaler")) == ["rel-driftline-api", "rel-driftline-ingest"]
        assert names(of_kind(docs, "PodDisruptionBudget")) == [f"rel-driftline-{stage}" for stage in STAGES]
        # The notifier restarts when its webhooks change (they are read once, at start).
        [notify] = [d for d in deployments if d["metadata"]["name"] == "rel-driftline-notify"]
        assert "checksum/secret" in notify["spec"]["template"]["metadata"]["annotations"]


def test_the_service_monitor_scrapes_probe_and_notify(tmp_path):
    docs = render(*single_values(tmp_path), "--set", "metrics.serviceMonitor.enabled=true")
    [monitor] = of_kind(docs, "ServiceMonitor")
    services = of_kind(docs, "Service")
    assert names(services) == [f"rel-driftline-{stage}" for stage in sorted(STAGES + SINGLE_STAGES)]
    selector = monitor["spec"]["selector"]["matchLabels"]
    port = monitor["spec"]["endpoints"][0]["port"]
    for service in services:
        stage = service["metadata"]["name"].removeprefix("rel-driftline-")
        assert selector.items() <= service["metadata"]["labels"].items()
        assert service["metadata"]["labels"]["app.kubernetes.io/component"] == stage
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == stage
        # The ingest stage also takes OTLP over gRPC, on the exporters' default port.
        extra = ["otlp-grpc"] if stage == "ingest" else []
        assert [p["name"] for p in service["spec"]["ports"]] == [port, *extra]


def test_the_rendered_probe_and_notify_configuration_loads_in_driftline(tmp_path):
    values = [*single_values(tmp_path), *WITH_KEY]
    config = rendered_config(tmp_path, *values)
    for stage in SINGLE_STAGES + STAGES:
        result = check_config(config, stage)
        assert result.returncode == 0, f"{stage}: {result.stderr}"
        assert "configuration ok" in result.stdout
    parsed = tomllib.loads(config.read_text())
    assert parsed["probe"]["interval_seconds"] == 30
    assert parsed["probe"]["servers"] == SINGLE_VALUES["probe"]["servers"]
    assert parsed["otlp"]["servers"] == SINGLE_VALUES["config"]["otlp"]["servers"]
    assert parsed["notify"]["public_url"] == "https://driftline.example.com"
    assert parsed["notify"]["webhooks_file"] == str(tmp_path / "webhooks.toml")
    [webhook] = tomllib.loads((tmp_path / "webhooks.toml").read_text())["webhooks"]
    assert webhook == {"url": WEBHOOK_URL, "format": "slack", "min_classification": "breaking",
                       "secret": WEBHOOK_SECRET, "projects": ["default"]}
    assert parsed["upstream_watcher"]["npm_interval_seconds"] == 600
    assert parsed["upstream"] == SINGLE_VALUES["upstream"]["packages"]
    # The loader reads the webhooks file: a bad webhook there fails the notify stage's check.
    (tmp_path / "webhooks.toml").write_text('[[webhooks]]\nurl = "ftp://example.com"\n')
    result = check_config(config, "notify")
    assert result.returncode == 2 and "notify.webhooks[0]" in result.stderr, result.stderr
    # The rendered servers go through the loader's own checks too.
    result = check_config(rendered_config(tmp_path, *values, "--set", "probe.servers[1].name=bad name"), "probe")
    assert result.returncode == 2 and "probe.servers[1].name" in result.stderr, result.stderr
    result = check_config(rendered_config(tmp_path, *values, "--set", "upstream.packages[1].package=pypi:../x"), "upstream")
    assert result.returncode == 2 and "upstream[1].package" in result.stderr, result.stderr
    result = check_config(rendered_config(tmp_path, *values, "--set", "config.otlp.servers[1].server=../x"), "ingest")
    assert result.returncode == 2 and "otlp.servers[1].server" in result.stderr, result.stderr


def test_the_upstream_stage_has_its_image_cache_sandbox_profile_and_egress_to_registries_only(tmp_path):
    docs = render(*single_values(tmp_path), *WITH_KEY)
    [deployment] = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "rel-driftline-upstream"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "registry.example/driftline-upstream:1.0"
    # bubblewrap's user namespace needs a seccomp profile that allows it; the rest stays locked down.
    context = container["securityContext"]
    assert context["seccompProfile"] == {"type": "Unconfined"}
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    # The other stages keep the runtime's default profile.
    for other in of_kind(docs, "Deployment"):
        if other is not deployment:
            assert "seccompProfile" not in other["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "upstream-cache"]
    assert mount["mountPath"] == "/var/cache/driftline-upstream"
    [volume] = [v for v in pod["volumes"] if v["name"] == "upstream-cache"]
    assert volume["emptyDir"]["sizeLimit"] == "10Gi"
    [config_map] = of_kind(docs, "ConfigMap")
    assert 'cache_dir = "/var/cache/driftline-upstream"' in config_map["data"]["driftline.toml"]
    docs = render(*single_values(tmp_path), "--set", "upstream.cache.existingClaim=upstream-cache")
    [deployment] = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "rel-driftline-upstream"]
    [volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "upstream-cache"]
    assert volume == {"name": "upstream-cache", "persistentVolumeClaim": {"claimName": "upstream-cache"}}
    # Egress: DNS, Kafka, and HTTPS outside the private ranges; ingress only to the metrics port.
    [policy] = of_kind(docs, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "upstream"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    egress = policy["spec"]["egress"]
    assert [r["ports"][0]["port"] for r in egress] == [53, 9092, 443]
    [internet] = egress[2]["to"]
    assert internet["ipBlock"]["cidr"] == "0.0.0.0/0" and "10.0.0.0/8" in internet["ipBlock"]["except"]
    # A mirror inside: only its addresses.
    docs = render(*single_values(tmp_path), "--set", "upstream.networkPolicy.registryCidrs={10.1.2.0/24}",
                  "--set", "upstream.networkPolicy.registryPort=8443")
    [policy] = of_kind(docs, "NetworkPolicy")
    assert policy["spec"]["egress"][2] == {"to": [{"ipBlock": {"cidr": "10.1.2.0/24"}}],
                                           "ports": [{"port": 8443, "protocol": "TCP"}]}


def test_webhook_urls_and_secrets_are_only_in_the_secret(tmp_path):
    docs = render(*single_values(tmp_path), *WITH_KEY)
    [secret] = of_kind(docs, "Secret")
    assert WEBHOOK_URL in secret["stringData"]["webhooks.toml"]
    assert WEBHOOK_SECRET in secret["stringData"]["webhooks.toml"]
    for doc in docs:
        if doc is not secret:
            text = json.dumps(doc)
            assert WEBHOOK_URL not in text and WEBHOOK_SECRET not in text, doc["metadata"]["name"]
    # With a Secret of your own (holding webhooks.toml), the chart renders no Secret and still no webhook.
    docs = render(*single_values(tmp_path), "--set", "secrets.existingSecret=mine")
    assert not of_kind(docs, "Secret")
    assert not any(WEBHOOK_URL in json.dumps(doc) or WEBHOOK_SECRET in json.dumps(doc) for doc in docs)
    [config_map] = of_kind(docs, "ConfigMap")
    assert 'webhooks_file = "/etc/driftline/secret/webhooks.toml"' in config_map["data"]["driftline.toml"]


def test_alert_rules_pass_promtool():
    result = subprocess.run(
        ["promtool", "check", "rules", str(CHART / "files" / "driftline-rules.yaml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 10 rules found" in result.stdout


def test_the_grafana_dashboard_reads_driftline_metrics():
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "driftline.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 10 and all("driftline_" in e for e in exprs)


def test_the_dockerfile_builds_in_one_stage_and_runs_unprivileged_in_another():
    lines = [l.strip() for l in (ROOT / "Dockerfile").read_text().splitlines() if l.strip() and not l.startswith("#")]
    stages = [l for l in lines if l.startswith("FROM ")]
    assert len(stages) == 2 and " AS build" in stages[0]
    runtime = lines[lines.index(stages[1]):]
    assert any(l.startswith("COPY --from=build ") for l in runtime)
    user = [l for l in runtime if l.startswith("USER ")]
    assert user and user[-1].split()[1].split(":")[0] not in ("0", "root")
    assert any("cargo build --release --locked" in l for l in lines)
    assert not any(l.startswith("ADD ") for l in lines)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, env, log):
    process = subprocess.Popen([DRIFTLINE, *args], env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    line = process.stdout.readline()
    assert line.startswith("driftline listening on "), line
    return process, line.strip().removeprefix("driftline listening on ")


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_prometheus_scrapes_every_stage(tmp_path):
    run = f"scrape{os.getpid()}"
    env = dict(
        os.environ,
        DRIFTLINE__STORAGE__BUS="kafka",
        DRIFTLINE__STORAGE__STORE="clickhouse",
        DRIFTLINE__KAFKA__BROKERS=os.environ.get("KAFKA_BROKERS", "127.0.0.1:19092"),
        DRIFTLINE__KAFKA__TOPIC_PREFIX=f"{run}.",
        DRIFTLINE__CLICKHOUSE__URL=os.environ.get("CLICKHOUSE_URL", "http://127.0.0.1:18123"),
        DRIFTLINE__CLICKHOUSE__DATABASE=run,
    )
    subprocess.run([DRIFTLINE, "migrate"], env=env, check=True, capture_output=True)
    processes = []
    try:
        with open(tmp_path / "stages.log", "w") as log:
            targets = {}
            for stage in ("ingest", "detect", "api"):
                process, url = start([stage, "--bind", "127.0.0.1:0"], env, log)
                processes.append(process)
                targets[stage] = url.removeprefix("http://")
            demo = subprocess.run(
                [DRIFTLINE, "demo", "--url", "http://" + targets["api"], "--ingest-url", "http://" + targets["ingest"]],
                capture_output=True, text=True,
            )
            assert demo.returncode == 0, demo.stderr
            port = free_port()
            config = {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "driftline", "static_configs": [
                        {"targets": [target], "labels": {"stage": stage}} for stage, target in targets.items()
                    ]}
                ],
            }
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
            prometheus = subprocess.Popen(
                ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=log,
            )
            processes.append(prometheus)
            wanted = {
                ("ingest", 'driftline_ingest_spans_total{result="accepted"}'),
                ("detect", 'driftline_drift_events_total{classification="BREAKING"}'),
                ("detect", "driftline_worker_owned_partitions"),
                ("api", 'driftline_http_requests_total{route="/api/health/servers"}'),
            }
            deadline = time.time() + 60
            found = set()
            while found != wanted:
                assert time.time() < deadline, f"Prometheus did not return {wanted - found} within 60 s"
                for stage, selector in wanted - found:
                    query = urllib.parse.quote(f'{selector.rstrip("}")}{"," if "{" in selector else "{"}stage="{stage}"}}')
                    try:
                        answer = get_json(f"http://127.0.0.1:{port}/api/v1/query?query={query}")
                    except OSError:
                        continue
                    series = answer["data"]["result"]
                    if series and all(s["metric"]["job"] == "driftline" for s in series) and float(series[0]["value"][1]) > 0:
                        found.add((stage, selector))
                time.sleep(0.5)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
