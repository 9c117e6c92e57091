"""AlexNet as paper 003 runs it (DNNMark's one-tower AlexNet), layer names as in its Table 1."""

from tracker.nets.layers import LRN, Linear, Network, ReLU, Softmax, conv, maxpool

NOTES = [
    "one-tower AlexNet of paper 003 (DNNMark): convolutions are ungrouped, unlike the two-GPU "
    "original whose conv2, conv4 and conv5 were split into 2 groups",
    "LRN: size 5, alpha 1e-4, beta 0.75, k 2, across channels",
]


def alexnet() -> Network:
    net = Network("alexnet", (3, 227, 227), options={}, notes=list(NOTES))
    net.add("conv1", conv(96, 11, stride=4))
    net.add("relu1", ReLU())
    net.add("lrn1", LRN())
    net.add("pool1", maxpool(3, 2))
    net.add("conv2", conv(256, 5, pad=2))
    net.add("relu2", ReLU())
    net.add("lrn2", LRN())
    net.add("pool2", maxpool(3, 2))
    net.add("conv3", conv(384, 3, pad=1))
    net.add("relu3", ReLU())
    net.add("conv4", conv(384, 3, pad=1))
    net.add("relu4", ReLU())
    net.add("conv5", conv(256, 3, pad=1))
    net.add("relu5", ReLU())
    net.add("pool5", maxpool(3, 2))
    net.add("fc6", Linear(4096))
    net.add("relu6", ReLU())
    net.add("fc7", Linear(4096))
    net.add("relu7", ReLU())
    net.add("fc8", Linear(1000))
    net.add("softmax", Softmax())
    return net
