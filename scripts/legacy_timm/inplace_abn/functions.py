"""The computation of ``inplace_abn.functions``: batch norm, then the activation, as two graph
nodes (the extension fuses them into one kernel and reuses the input's memory; the graph's work
is the same)."""
import torch.nn.functional as F


def inplace_abn(x, weight, bias, running_mean, running_var, training=True, momentum=0.1, eps=1e-5,
                activation="leaky_relu", activation_param=0.01):
    y = F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
    if activation == "leaky_relu":
        return F.leaky_relu(y, activation_param)
    if activation == "elu":
        return F.elu(y, activation_param)
    return y


inplace_abn_sync = inplace_abn
