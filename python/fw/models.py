"""Reference model classes.

Every class records its constructor arguments in ``self.fw_init_kwargs`` so
:func:`fw.checkpoint.save` can store them and :func:`fw.checkpoint.load` can rebuild the model.
Input and output names used by :mod:`fw.export` come from ``fw_input_names`` / ``fw_output_names``.
All models are scriptable (``torch.jit.script``) as well as traceable.
"""

from __future__ import annotations

import torch
from torch import nn


class DigitsMLP(nn.Module):
    """64 -> hidden -> hidden -> 10 on scikit-learn's 8x8 digits; input ``[N, 64]`` float32 in 0..1."""

    fw_input_names = ("input",)
    fw_output_names = ("logits",)

    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.fw_init_kwargs = {"hidden": hidden}
        self.net = nn.Sequential(
            nn.Linear(64, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class DigitsCNN(nn.Module):
    """Two 3x3 convolutions and a linear head; input ``[N, 1, 8, 8]`` float32 in 0..1."""

    fw_input_names = ("input",)
    fw_output_names = ("logits",)

    def __init__(self) -> None:
        super().__init__()
        self.fw_init_kwargs = {}
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        if stride != 1 or in_ch != out_ch:
            self.shortcut: nn.Module = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2015): 7x7 stem, four stages of two BasicBlocks, global pool, linear.

    Input ``[N, 3, 224, 224]`` float32, ImageNet-normalised.
    """

    fw_input_names = ("input",)
    fw_output_names = ("logits",)

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.fw_init_kwargs = {"num_classes": num_classes}
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages = []
        in_ch = 64
        for out_ch, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(BasicBlock(in_ch, out_ch, stride), BasicBlock(out_ch, out_ch, 1)))
            in_ch = out_ch
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stages(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


class TextClassifier(nn.Module):
    """int64 token ids ``[N, T]`` -> Embedding -> LSTM (batch_first) -> Linear on the last hidden state."""

    fw_input_names = ("tokens",)
    fw_output_names = ("logits",)

    def __init__(self, vocab: int = 1000, dim: int = 32, hidden: int = 64, classes: int = 2) -> None:
        super().__init__()
        self.fw_init_kwargs = {"vocab": vocab, "dim": dim, "hidden": hidden, "classes": classes}
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(self.embed(tokens))
        return self.fc(h[-1])
