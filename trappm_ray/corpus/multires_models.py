"""Multi-branch, multi-resolution convnets built here in plain torch: the make-up of a family the
GPU labels hold none of (parallel streams at several resolutions that exchange features at
every stage), to see what the physics and the learned predictors say of such a net.

A net of width ``w`` and ``b`` branches: a stem of two stride-2 3x3 convolutions to 1/4 of the
input; then stages 1..b, stage ``k`` running ``k`` branches at 1/4, 1/8, ... of the input with
``w, 2w, 4w, ...`` channels, each branch ``blocks`` residual blocks (two 3x3 conv + BatchNorm +
ReLU), and at the end of every stage an exchange: each branch receives every other one, a
higher-resolution one through strided 3x3 convolutions, a lower-resolution one through a 1x1
convolution and nearest upsampling, summed; a new branch is made from the lowest one by a
strided convolution. The head upsamples every branch to 1/4, concatenates, mixes with a 1x1
convolution, pools and classifies (1,000 classes). The description is this module's own;
multi-resolution nets of this make-up are published (e.g. Wang et al., HRNet, TPAMI 2020), no
code of theirs is used.

    export(name("multires", width=18, branches=4)) -> ONNX bytes
"""
from __future__ import annotations

WIDTHS = (18, 32, 48)
BRANCHES = (2, 3, 4)
CLASSES = 1000


def name(width: int, branches: int, blocks: int = 1) -> str:
    """The net's corpus name: ``multires_w18_b4`` (``_k2`` for two blocks a branch)."""
    return f"multires_w{width}_b{branches}" + (f"_k{blocks}" if blocks != 1 else "")


def parse(model: str) -> tuple[int, int, int]:
    """``(width, branches, blocks)`` of a :func:`name`; ValueError for another name."""
    parts = model.split("_")
    try:
        if parts[0] != "multires" or len(parts) not in (3, 4):
            raise ValueError
        width, branches = int(parts[1].removeprefix("w")), int(parts[2].removeprefix("b"))
        blocks = int(parts[3].removeprefix("k")) if len(parts) == 4 else 1
    except ValueError:
        raise ValueError(f"not a multi-resolution net name: {model!r} (e.g. {name(18, 4)})") from None
    if not (width > 0 and 1 <= branches <= 5 and 1 <= blocks <= 4):
        raise ValueError(f"{model!r}: width > 0, 1-5 branches, 1-4 blocks")
    return width, branches, blocks


def build(model: str):
    """The torch module of :func:`name` ``model`` (eval mode, seeded)."""
    import torch
    from torch import nn

    width, branches, blocks = parse(model)
    torch.manual_seed(0)

    def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, relu: bool = True) -> nn.Sequential:
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, nn.ReLU()) if relu else nn.Sequential(*layers)

    class Block(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.body = nn.Sequential(conv_bn(c, c), conv_bn(c, c, relu=False))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    class Exchange(nn.Module):
        """Branch j's output: the sum over branches i of branch i resampled to j's resolution."""

        def __init__(self, chans: list[int]):
            super().__init__()
            self.paths = nn.ModuleList()
            for j, cj in enumerate(chans):
                row = nn.ModuleList()
                for i, ci in enumerate(chans):
                    if i == j:
                        row.append(nn.Identity())
                    elif i > j:  # lower resolution: 1x1 conv, then upsample
                        row.append(nn.Sequential(conv_bn(ci, cj, 1, relu=False),
                                                 nn.Upsample(scale_factor=2 ** (i - j), mode="nearest")))
                    else:  # higher resolution: strided 3x3 convs, one per halving
                        steps = [conv_bn(ci, ci, 3, 2) for _ in range(j - i - 1)]
                        row.append(nn.Sequential(*steps, conv_bn(ci, cj, 3, 2, relu=False)))
                self.paths.append(row)

        def forward(self, xs):
            return [torch.relu(sum(p(x) for p, x in zip(row, xs))) for row in self.paths]

    class MultiRes(nn.Module):
        def __init__(self):
            super().__init__()
            chans = [width * 2 ** k for k in range(branches)]
            self.stem = nn.Sequential(conv_bn(3, 64, 3, 2), conv_bn(64, 64, 3, 2), conv_bn(64, chans[0], 1))
            self.stages, self.exchanges, self.new = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
            for k in range(1, branches + 1):
                self.stages.append(nn.ModuleList(nn.Sequential(*[Block(chans[i]) for _ in range(blocks)])
                                                 for i in range(k)))
                self.exchanges.append(Exchange(chans[:k]))
                self.new.append(conv_bn(chans[k - 1], chans[k], 3, 2) if k < branches else nn.Identity())
            self.mix = conv_bn(sum(chans), 4 * width, 1)
            self.ups = nn.ModuleList(nn.Upsample(scale_factor=2 ** i, mode="nearest") if i else nn.Identity()
                                     for i in range(branches))
            self.fc = nn.Linear(4 * width, CLASSES)

        def forward(self, x):
            xs = [self.stem(x)]
            for k, (stage, exchange, new) in enumerate(zip(self.stages, self.exchanges, self.new)):
                xs = exchange([branch(x) for branch, x in zip(stage, xs)])
                if k + 1 < branches:
                    xs.append(new(xs[-1]))
            out = self.mix(torch.cat([up(x) for up, x in zip(self.ups, xs)], 1))
            return self.fc(out.mean((2, 3)))

    return MultiRes().eval()


def export(model: str, resolution: int = 224) -> bytes:
    """ONNX bytes (weights stripped) of :func:`name` ``model`` at ``resolution`` px (a multiple
    of 32), batch axis dynamic."""
    import torch

    from trappm_ray.corpus import export as exporting

    if resolution % 32:
        raise ValueError(f"resolution {resolution}: a multiple of 32 (every branch halves it)")
    return exporting.export_legacy(build(model), (torch.randn(2, 3, resolution, resolution),),
                                   input_names=["input"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


__all__ = ["WIDTHS", "BRANCHES", "name", "parse", "build", "export"]
