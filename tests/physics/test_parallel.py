import pytest

from trappm_ray.physics.collectives import Cluster
from trappm_ray.physics.megatron import megatron_setting, padded_vocab
from trappm_ray.physics.parallel import Layout, Part, Stack, iteration

NODE = Cluster("test", "test node", "", 8, intra_busbw_gbs=200.0, intra_latency_us=10.0, inter_gbps=800.0,
               inter_latency_us=10.0)


def stack(host_ms: float = 0.1, recompute: bool = True) -> Stack:
    return Stack(block=Part(device_ms=8.0, host_ms=host_ms, optimizer_ms=0.5),
                 rest=Part(device_ms=4.0, host_ms=host_ms, optimizer_ms=1.0),
                 blocks=8, block_params=12e6, rest_params=50e6, boundary_bytes=4 * 1024 * 1024 * 2,
                 recompute=recompute)


def test_one_gpu_is_the_micro_batches_in_a_row_plus_the_optimizer():
    est = iteration(stack(), Layout(1, 1, 1, micro_batch=4, global_batch=16), NODE)
    assert est.total_ms == pytest.approx(4 * (8 * 8.0 + 4.0) + 8 * 0.5 + 1.0)
    assert est.tp_comm_ms == est.p2p_ms == est.dp_allreduce_ms == est.bubble_ms == 0


def test_tensor_parallelism_splits_the_device_work_and_all_reduces_every_block():
    one = iteration(stack(), Layout(1, 1, 1, 4, 16), NODE)
    tp4 = iteration(stack(), Layout(4, 1, 1, 4, 16), NODE)
    assert tp4.stage_ms - tp4.tp_comm_ms == pytest.approx(one.stage_ms / 4)
    assert tp4.tp_comm_ms > 0
    no_recompute = iteration(stack(recompute=False), Layout(4, 1, 1, 4, 16), NODE)
    assert no_recompute.tp_comm_ms == pytest.approx(tp4.tp_comm_ms * 4 / 6)


def test_host_time_is_not_split_by_tensor_parallelism_and_hides_the_all_reduces():
    """NCCL's all-reduces are kernels on the stream: a host-bound GPU runs them while its host
    issues the next kernels, so the stage is the host's time, not the host's plus theirs."""
    est = iteration(stack(host_ms=5.0), Layout(8, 1, 1, 4, 16), NODE)
    assert 0 < est.tp_comm_ms < 8 * 5.0 + 5.0
    assert est.stage_ms == pytest.approx(8 * 5.0 + 5.0)


def test_what_tensor_parallelism_does_not_split_runs_whole_on_every_gpu():
    from dataclasses import replace
    whole = replace(stack(), block=Part(device_ms=8.0, host_ms=0.1, optimizer_ms=0.5, replicated_ms=2.0))
    split, kept = (iteration(s, Layout(4, 1, 1, 4, 16), NODE) for s in (stack(), whole))
    assert kept.stage_ms - split.stage_ms == pytest.approx(8 * (2.0 - 2.0 / 4))


def test_the_pipeline_bubble_shrinks_with_more_micro_batches():
    few = iteration(stack(), Layout(1, 4, 1, 4, 8), NODE)
    many = iteration(stack(), Layout(1, 4, 1, 4, 64), NODE)
    assert few.bubble_ms == pytest.approx(many.bubble_ms)
    assert few.bubble_ms / few.pipeline_ms > many.bubble_ms / many.pipeline_ms
    assert few.p2p_ms > 0


def test_data_parallel_replicas_all_reduce_their_gradients_and_share_the_batch():
    one = iteration(stack(), Layout(1, 1, 1, 4, 32), NODE)
    dp4 = iteration(stack(), Layout(1, 1, 4, 4, 32), NODE)
    assert dp4.pipeline_ms == pytest.approx(one.pipeline_ms / 4)
    assert dp4.dp_allreduce_ms > 0 and one.dp_allreduce_ms == 0


def test_layouts_that_cannot_run_are_refused():
    with pytest.raises(ValueError, match="whole number of micro-batches"):
        Layout(1, 1, 2, micro_batch=4, global_batch=12)
    with pytest.raises(ValueError, match="do not split into 3 pipeline stages"):
        iteration(stack(), Layout(1, 3, 1, 4, 12), NODE)


def with_memory(recompute: bool = True, rest_saved: float = 1e9) -> Stack:
    from dataclasses import replace

    from trappm_ray.physics.parallel import PartMemory
    return replace(stack(recompute=recompute), block_memory=PartMemory(50e6, 50e6, 100e6, saved=400e6, transient=50e6),
                   rest_memory=PartMemory(200e6, 200e6, 400e6, saved=rest_saved, transient=0.1 * rest_saved), fixed_bytes=500e6)


def test_memory_per_gpu_splits_the_state_over_tensor_parallel_ranks():
    from trappm_ray.physics.parallel import memory_per_gpu
    one = memory_per_gpu(with_memory(), Layout(1, 1, 1, 4, 16))
    tp2 = memory_per_gpu(with_memory(), Layout(2, 1, 1, 4, 16))
    state = 8 * 200e6 + 800e6
    assert one - tp2 == pytest.approx(state / 2 + (400e6 + 50e6 + 1.1e9) / 2)


def test_the_first_pipeline_stage_keeps_a_checkpoint_per_micro_batch_in_flight():
    from trappm_ray.physics.parallel import memory_per_gpu
    light_head = with_memory(rest_saved=0.0)  # the first stage is the fullest
    few = memory_per_gpu(light_head, Layout(1, 4, 1, 4, 4))  # one micro-batch: nothing else in flight
    many = memory_per_gpu(light_head, Layout(1, 4, 1, 4, 64))
    assert many - few == pytest.approx(3 * 2 * with_memory().boundary_bytes)
    assert memory_per_gpu(with_memory(recompute=False), Layout(1, 1, 1, 4, 16)) > memory_per_gpu(
        with_memory(), Layout(1, 1, 1, 4, 16))


def test_zero_shards_state_over_the_replicas_stage_by_stage():
    from trappm_ray.physics.parallel import memory_per_gpu
    used = [memory_per_gpu(with_memory(), Layout(1, 1, 4, 4, 64, zero=z)) for z in (0, 1, 2, 3)]
    assert used[0] > used[1] > used[2] > used[3]
    weights, grads, optimizer = 8 * 50e6 + 200e6, 8 * 50e6 + 200e6, 8 * 100e6 + 400e6
    assert used[0] - used[1] == pytest.approx(optimizer * 3 / 4)
    assert used[1] - used[2] == pytest.approx(grads * 3 / 4)
    assert used[2] - used[3] == pytest.approx(weights * 3 / 4 - 50e6)  # less the block gathered whole


def test_zero_updates_a_shard_and_zero_3_gathers_weights_under_the_compute():
    plain = iteration(stack(), Layout(1, 1, 4, 4, 64), NODE)
    zero1 = iteration(stack(), Layout(1, 1, 4, 4, 64, zero=1), NODE)
    assert zero1.optimizer_ms == pytest.approx(plain.optimizer_ms / 4)
    assert zero1.dp_allreduce_ms == pytest.approx(plain.dp_allreduce_ms)
    slow_net = Cluster("slow", "slow", "", 1, 200.0, 10.0, inter_gbps=1.0, inter_latency_us=10.0)
    hidden = iteration(stack(), Layout(1, 1, 4, 4, 64, zero=3), NODE)
    exposed = iteration(stack(), Layout(1, 1, 4, 4, 64, zero=3), slow_net)
    assert hidden.stage_ms == pytest.approx(plain.stage_ms)
    assert exposed.stage_ms > plain.stage_ms


def test_the_vocabulary_is_padded_as_megatron_pads_it():
    """GPT-2's 50,257 words become 50,304 (a multiple of 128): the head stays on the tensor cores."""
    assert padded_vocab({"vocab_size": 50257, "n_embd": 768})["vocab_size"] == 50304
    assert padded_vocab({"vocab_size": 32000}) == {"vocab_size": 32000}
    assert padded_vocab({"n_embd": 768}) == {"n_embd": 768}  # no vocabulary named: nothing to pad


def test_megatron_runs_adam_as_one_fused_kernel():
    assert megatron_setting("amp-fp16", "adam", True).fused_optimizer
    assert not megatron_setting("amp-fp16", "sgd-momentum", False).fused_optimizer


def test_where_the_iteration_goes_adds_up_and_names_the_links():
    from trappm_ray.physics.parallel import traffic
    for lo in (Layout(8, 1, 1, 4, 16), Layout(2, 2, 2, 4, 16), Layout(1, 4, 4, 2, 32, zero=3)):
        est = iteration(stack(host_ms=1.0), lo, NODE)
        assert sum(est.where().values()) == pytest.approx(est.total_ms)
    tp_only = iteration(stack(), Layout(8, 1, 1, 4, 16), NODE)
    assert tp_only.intra_node_bytes > 0 and tp_only.network_bytes == 0
    # 8 blocks x 6 all-reduces x 4 micro-batches, each GPU sending 2 x 7/8 of an 8 MiB message
    assert tp_only.intra_node_bytes == pytest.approx(4 * 6 * 8 * 2 * 7 / 8 * 8 * 2**20)
    two_nodes = traffic(stack(), Layout(8, 1, 2, 4, 16), NODE, 8, 1, 2, 62e6 / 8)
    assert two_nodes[1] == pytest.approx(2 * 1 / 2 * 62e6 / 8 * 2)  # the gradients' all-reduce over the network


def test_a_pipeline_stage_cannot_hide_its_backward_behind_its_forwards_host_time():
    """Megatron synchronizes the device after every exchange between stages: a stage whose forward
    waits on the host and whose backward on the device takes both, where without a pipeline the
    host's lead carries over from one pass into the next."""
    part = Part(device_ms=9.0, host_ms=6.0, optimizer_ms=0.0, forward_device_ms=1.0, forward_host_ms=4.0)
    piped = Stack(part, part, blocks=8, block_params=1e6, rest_params=1e6, boundary_bytes=0.0, recompute=False)
    est = iteration(piped, Layout(1, 2, 1, 1, 8), NODE)
    # forward max(1, 4) + backward max(8, 2) per block, 4 blocks and the rest on the last stage
    assert est.stage_ms - est.p2p_ms == pytest.approx(5 * (4.0 + 8.0))
    assert iteration(piped, Layout(1, 1, 1, 1, 8), NODE).stage_ms == pytest.approx(9 * 9.0)  # max(device, host)
    # a part without the split (forward shares 0) keeps the whole pass as one max
    plain = iteration(stack(), Layout(1, 2, 1, 4, 16), NODE)
    assert plain.stage_ms - plain.p2p_ms == pytest.approx(4 * 8.0 + 4.0)
