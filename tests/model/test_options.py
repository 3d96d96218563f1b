"""Training options: what a predictor was trained on, and refusing what it never saw."""
import pytest

from trappm_ray import errors
from trappm_ray.model import options
from trappm_ray.model.manifest import NETWORK, Device, Manifest


def manifest(options: dict | None = None, slug: str = "cpu-t1", moves: tuple[str, ...] = ()) -> Manifest:
    return Manifest(name="p", kind=NETWORK, feature_set="v2", targets=("train_step_ms",), device=Device(slug),
                    options=options or {}, moves=moves)


def test_label_options_most_frequent_first_and_cpu_dtype():
    rows = [{"dtype": "float32", "optimizer": "adam"}] * 2 + [
        {"precision": "amp-fp16", "optimizer": "sgd", "memory_format": "nhwc", "gpus": 1}] * 3
    got = options.label_options(rows)
    assert got["precision"] == ["amp-fp16", "fp32"] and got["optimizer"] == ["sgd", "adam"]
    assert got["memory_format"] == ["nhwc"] and got["gpus"] == [1]


def test_defaults_come_from_the_predictor():
    gpu = manifest(options={"precision": ["amp-fp16"], "optimizer": ["sgd"], "gpus": [1]}, slug="rtx3090-amp")
    assert options.resolve({}, gpu) == {"precision": "amp-fp16", "optimizer": "sgd", "gpus": 1,
                                        "memory_format": None}
    assert options.resolve({}, manifest())["optimizer"] == "adam"  # a legacy CPU manifest


@pytest.mark.parametrize("requested,why", [
    ({"precision": "amp-fp16"}, "trained on precision fp32"),
    ({"optimizer": "lamb"}, "not one of"),
    ({"memory_format": "nhwc"}, "do not vary memory_format"),
    ({"gpus": 4}, "trained on gpus 1"),
])
def test_unseen_options_are_refused(requested, why):
    with pytest.raises(errors.UnsupportedOption, match=why) as e:
        options.resolve(requested, manifest())
    assert e.value.status == 400 and str(e.value).startswith("unsupported_option: ")


def test_step_fields_resolve_only_where_a_step_model_moves_them():
    gpu = manifest({"precision": ["amp-fp16"], "optimizer": ["sgd"], "gpus": [1]}, moves=("recompute", "grad_accum"))
    got = options.resolve({"recompute": True, "grad_accum": 8}, gpu)
    assert got["recompute"] is True and got["grad_accum"] == 8
    assert "recompute" not in options.resolve({"recompute": False, "grad_accum": 1}, gpu)  # defaults left out
    with pytest.raises(errors.UnsupportedOption, match="grad_accum must be a whole number"):
        options.resolve({"grad_accum": 2.5}, gpu)
    with pytest.raises(errors.UnsupportedOption, match="recompute is answered on GPUs"):
        options.resolve({"recompute": True}, manifest())
