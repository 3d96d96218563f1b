"""The local cluster the jobs start listens on the loopback interface only."""
import subprocess


def test_local_cluster_is_loopback_only(ray_session):
    ray = ray_session
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    gcs_port = ray.get_runtime_context().gcs_address.rsplit(":", 1)[1]
    listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
    local = [line.split()[3] for line in listening.splitlines()[1:]
             if line.split()[3].endswith(f":{gcs_port}")]
    assert local and all("127.0.0.1" in addr for addr in local), local


def test_no_address_or_local_starts_a_private_loopback_cluster(monkeypatch):
    import ray

    from trappm_ray.ray_init import ensure_ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    local = {"address": "local", "num_cpus": 2, "include_dashboard": False, "log_to_driver": False,
             "_node_ip_address": "127.0.0.1"}
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ensure_ray(num_cpus=2)
    assert calls == [local]  # never joins a `ray start` cluster that happens to run here
    monkeypatch.setenv("RAY_ADDRESS", "local")
    ensure_ray(num_cpus=2)
    assert calls[-1] == local
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    ensure_ray()
    assert calls[-1] == {"address": "auto", "log_to_driver": True}
