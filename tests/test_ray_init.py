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
