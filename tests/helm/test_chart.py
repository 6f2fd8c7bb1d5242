"""`make helm-check`: the chart lints and renders; every stage carries probes, resources and a locked-down
security context; the Jobs are hooks; monitoring objects appear only when enabled; the rendered driftline.toml
loads in the binary's own config loader; the alert rules pass promtool; a real Prometheus scrapes the running
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


def render(*args):
    result = subprocess.run([HELM, "template", "rel", str(CHART), *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(docs, kind):
    return [doc for doc in docs if doc["kind"] == kind]


def names(docs):
    return sorted(doc["metadata"]["name"] for doc in docs)


def test_the_chart_lints_with_default_and_production_values():
    for values in ([], PRODUCTION):
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
        "DriftlineConsumerLagGrowing",
        "DriftlineDeadLetters",
        "DriftlineIngest5xx",
    }


def rendered_config(directory, *values):
    docs = render(*values)
    [config_map] = of_kind(docs, "ConfigMap")
    secrets = of_kind(docs, "Secret")
    keys = directory / "keys.toml"
    if secrets:
        keys.write_text(secrets[0]["stringData"]["keys.toml"])
    else:
        # secrets.existingSecret: the operator's Secret holds keys.toml in the same form.
        keys.write_text('[[keys]]\nproject = "default"\nscopes = ["ingest", "read"]\nsha256 = "' + "cd" * 32 + '"\n')
    config = directory / "driftline.toml"
    config.write_text(config_map["data"]["driftline.toml"].replace("/etc/driftline/secret/keys.toml", str(keys)))
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


def test_alert_rules_pass_promtool():
    result = subprocess.run(
        ["promtool", "check", "rules", str(CHART / "files" / "driftline-rules.yaml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


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
