"""The models of public training measurements that no model zoo names: built here in plain torch
from the sizes their sources state, exported like every corpus model (no weights).

* ``cifar_resnet18``: ResNet-18 for 32 px inputs (3x3 stride-1 stem, no max-pool; BasicBlocks
  64-128-256-512, two per stage), the CIFAR-10 ResNet-18 that Pollux's ``cifar10`` and Gavel's
  ResNet-18 jobs train (torchvision's blocks; the stem as CIFAR code writes it).
* ``lstm_lm``: Gavel's LM job: embedding, 2-layer LSTM of 200 units, decoder to the vocabulary
  (WikiText-2: 33,278 words), a sequence of 35 tokens (bptt).
* ``transformer_mt``: Gavel's Transformer job: ``nn.Transformer`` with d_model 512, 8 heads,
  6 encoder and 6 decoder layers, feed-forward 2048, embeddings and output projection over a
  Multi30k-sized vocabulary (about 10,000 words; not stated by the source), sentences of 32
  tokens (Multi30k's are about 13 words: 32 is an upper estimate, not stated).
* ``recoder_ae``: Gavel's Recommendation job: an autoencoder over MovieLens-20M's 26,744 items
  with one hidden layer of 200 units (dense: the source's sparse input layer does the same
  multiplies only on rated items, so this errs high on compute).
* ``cifar_shufflenetv2``: Zeus's CIFAR-100 ShuffleNetV2 (x1.0 widths 116-232-464, 1024 final
  channels; a 3x3 stride-1 stem and no max-pool, as CIFAR code writes it), 32 px, 100 classes.
* ``bert_base_cls`` / ``bert_base_qa``: BERT-base (uncased sizes) with a sequence-classification
  or a question-answering head (Zeus's Sentiment140 and SQuAD fine-tuning; the sequence length is
  an input dimension, ``seq``).

Where the source leaves a size unstated the choice is named above; a sweep's batch *ratios*
depend on it less than its absolute times.
"""
from __future__ import annotations

WORKLOADS = ("cifar_resnet18", "lstm_lm", "transformer_mt", "recoder_ae", "cifar_shufflenetv2", "bert_base_cls",
             "bert_base_qa")
BERT_BASE = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}
BERT_HEADS = {"bert_base_cls": "BertForSequenceClassification", "bert_base_qa": "BertForQuestionAnswering"}
EXPORTER = "torch.onnx legacy (dynamo=False), opset 17, eval mode, dynamic batch axis, plain torch"
WIKITEXT2_VOCAB, MULTI30K_VOCAB, MOVIELENS_ITEMS = 33278, 10000, 26744
BPTT, SENTENCE = 35, 32


def build(name: str):
    """``(module, example input, input names, dynamic axes)`` of workload ``name``."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "cifar_resnet18":
        import torchvision

        model = torchvision.models.resnet18(num_classes=10)
        model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        model.maxpool = nn.Identity()
        return model.eval(), (torch.randn(2, 3, 32, 32),), ["input"], {"input": {0: "batch"}}
    if name == "lstm_lm":
        return _LstmLM().eval(), (torch.zeros(2, BPTT, dtype=torch.long),), ["input_ids"], {"input_ids": {0: "batch"}}
    if name == "transformer_mt":
        ids = torch.zeros(2, SENTENCE, dtype=torch.long)
        return (_Translator().eval(), (ids, ids), ["src_ids", "tgt_ids"],
                {"src_ids": {0: "batch"}, "tgt_ids": {0: "batch"}})
    if name == "cifar_shufflenetv2":
        import torchvision

        model = torchvision.models.shufflenet_v2_x1_0(num_classes=100)
        model.conv1 = nn.Sequential(nn.Conv2d(3, 24, 3, 1, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True))
        model.maxpool = nn.Identity()
        return model.eval(), (torch.randn(2, 3, 32, 32),), ["input"], {"input": {0: "batch"}}
    if name == "recoder_ae":
        model = nn.Sequential(nn.Linear(MOVIELENS_ITEMS, 200), nn.Sigmoid(), nn.Linear(200, MOVIELENS_ITEMS))
        return model.eval(), (torch.randn(2, MOVIELENS_ITEMS),), ["input"], {"input": {0: "batch"}}
    raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


FAMILIES = {"cifar_resnet18": "resnet", "lstm_lm": "lstm", "transformer_mt": "transformer", "recoder_ae": "autoencoder",
            "cifar_shufflenetv2": "shufflenet", "bert_base_cls": "bert", "bert_base_qa": "bert"}


def bert_config(name: str) -> dict:
    """The transformers config of a BERT workload (BERT-base with the workload's head)."""
    return {**BERT_BASE, "architectures": [BERT_HEADS[name]]}


def family_of(name: str) -> str:
    """The workload's model family."""
    return FAMILIES.get(name, name.split("_")[0])


def count_params(name: str) -> int:
    """Parameters of workload ``name`` (tied weights once), built on the meta device."""
    import torch

    if name in BERT_HEADS:
        from trappm_ray.corpus.text_models import build_model
        with torch.device("meta"):
            model = build_model(name, config=bert_config(name), meta=False)
    else:
        with torch.device("meta"):
            model = build(name)[0]
    return sum(p.numel() for p in model.parameters())


def export(name: str) -> bytes:
    """ONNX bytes (weights stripped) of workload ``name``, batch axis dynamic."""
    import torch

    from trappm_ray.corpus import export as exporting

    if name in BERT_HEADS:
        from trappm_ray.corpus.text_models import export_text_model
        return export_text_model(name, config=bert_config(name))[0]
    model, args, names, axes = build(name)
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # eval-mode nn.Transformer's fused op has no ONNX form
    try:
        return exporting.export_legacy(model, args, input_names=names,
                                       dynamic_axes={**axes, "output": {0: "batch"}})
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)


def _modules():
    from torch import nn

    class LstmLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(WIKITEXT2_VOCAB, 200)
            self.rnn = nn.LSTM(200, 200, num_layers=2, batch_first=True)
            self.decoder = nn.Linear(200, WIKITEXT2_VOCAB)

        def forward(self, ids):
            return self.decoder(self.rnn(self.embed(ids))[0])

    class Translator(nn.Module):
        def __init__(self):
            super().__init__()
            self.src, self.tgt = nn.Embedding(MULTI30K_VOCAB, 512), nn.Embedding(MULTI30K_VOCAB, 512)
            self.core = nn.Transformer(512, 8, 6, 6, 2048, batch_first=True)
            self.out = nn.Linear(512, MULTI30K_VOCAB)

        def forward(self, src, tgt):
            return self.out(self.core(self.src(src), self.tgt(tgt)))

    return LstmLM, Translator


def _LstmLM():
    return _modules()[0]()


def _Translator():
    return _modules()[1]()


__all__ = ["WORKLOADS", "EXPORTER", "build", "export"]
