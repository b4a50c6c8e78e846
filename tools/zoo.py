"""The model zoo: real architectures with seeded random weights, exported to ONNX and run on
every backend against onnxruntime.

    pip install torch==2.14.1 torchvision==0.29.1 timm transformers ultralytics
    python tools/zoo.py                                   # every model, every backend here
    python tools/zoo.py --models resnet18,bert2 --backends numpy,webgpu --precision fp32,fp16
    python tools/zoo.py --export-only --onnx-dir .zoo     # write the .onnx files and stop
    python tools/zoo.py --models timm/mvitv2_tiny,torchvision/regnet_x_400mf   # any other one
    python tools/zoo.py --models torchvision/deeplabv3_mobilenet_v3_large,torchvision/r3d_18@112
    python tools/zoo.py --models torchvision/maskrcnn_resnet50_fpn@320   # any detector too
    python tools/zoo.py --dynamic --models gpt2_2l,ssdlite320   # symbolic batch, length, size

Nothing is downloaded: torchvision and timm models are built with `weights=None`, YOLOv8n from
ultralytics' own yaml, BERT from a transformers Config, the CRNN here. Random weights that zero
or explode activations hide mistakes, so each model is conditioned first: norm scales and
shifts are randomized, and batch-norm statistics (and a two-stage detector's box head) are set
from one pass over the input.

Each model is exported once to `--onnx-dir` (reused when the file exists: a machine without
ultralytics runs the YOLO file exported elsewhere), then run by onnxruntime (CPU, the
reference) and by tinydl on each backend with the NumPy reference as fallback
(`backends=(backend, "numpy")`), so the placement shows what the backend ran. Reported per model
and backend: the largest relative error over outputs (max |tinydl - onnxruntime| / max |ref|),
the median time of a run with host input and output, and the share of nodes the backend ran
with the ops it handed to the fallback. fp32 must be within 1e-4; fp16 within 1e-2 where the
model's activations stay in fp16's range. The export also keeps PyTorch's own outputs (at the
example's feeds, and the other shapes' with --dynamic): where onnxruntime cannot run a file
(torchvision's MViT-V1-B: an If branch's declared shape is wrong), those are the reference, and
the table says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tinydl as td  # noqa: E402

SEED = 0


# -- building -------------------------------------------------------------------------------------


def _condition(model, example) -> None:
    """Randomize norm scales/shifts and set batch-norm statistics from one pass."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    norms = []
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            norms.append(m)
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: one pass gives that batch's statistics
        if isinstance(
            m, torch.nn.modules.batchnorm._BatchNorm | torch.nn.LayerNorm | torch.nn.GroupNorm
        ):
            if getattr(m, "weight", None) is not None:
                with torch.no_grad():
                    m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    with torch.no_grad():
        for m in model.modules():
            # a zero-initialized layer (torchvision ViT's head) would make every output 0
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                m.weight.normal_(0.0, m.in_features**-0.5, generator=g)
    if norms:
        # A detector's heads want targets in training mode: its backbone alone sets the stats.
        body = getattr(model, "backbone", model)
        # (two images: a 1x1 feature map of one image has no batch statistics)
        batch = tuple(
            torch.cat([t[None], t.flip(-1)[None]]) if t.dim() == 3 else t for t in example
        )
        body.train()
        with torch.no_grad():
            try:
                body(*batch)
            except ValueError:  # a 1x1 map of one image (DeepLabV3's image pooling): two
                for m in norms:
                    m.reset_running_stats()
                body(*(_and_mirror(t) for t in batch))
    model.eval()
    _calibrate_box_head(model, example)


def _calibrate_box_head(model, example) -> None:
    """A two-stage detector's box head (Faster, Mask and Keypoint R-CNN) from one pass: random
    weights over conditioned features gave class logits tens apart (one class at 1.0, the rest
    under 1e-16: a box or two survive) and wild box deltas. Each output is centred over the
    pass's proposals and scaled to a spread of 2 (class logits) or 0.5 (box deltas)."""
    import torch

    heads = getattr(getattr(model, "detector", None), "roi_heads", None)
    pred = getattr(heads, "box_predictor", None)
    if pred is None or not hasattr(pred, "cls_score"):
        return
    feats = []
    hook = pred.register_forward_hook(lambda m, inp, out: feats.append(inp[0].detach()))
    with torch.no_grad():
        model(*example)
    hook.remove()
    x = feats[0].flatten(1)
    with torch.no_grad():
        for lin, spread in ((pred.cls_score, 2.0), (pred.bbox_pred, 0.5)):
            y = x @ lin.weight.T + lin.bias
            k = spread / max(float(y.std()), 1e-12)
            lin.bias.copy_(k * (lin.bias - y.mean(0)))
            lin.weight.mul_(k)


def _and_mirror(t):
    """A batch of one image (N, C, ...) and its mirror image; other tensors as they are."""
    import torch

    if t.dim() >= 4 and t.shape[0] == 1 and t.is_floating_point():
        return torch.cat([t, t.flip(-1)])
    return t


def _image(size: int) -> np.ndarray:
    """scikit-image's astronaut at size x size, ImageNet-normalized, NCHW float32 (a natural
    image keeps detectors' scores and boxes meaningful); noise if scikit-image is missing."""
    try:
        from PIL import Image
        from skimage import data

        rgb = Image.fromarray(data.astronaut()).resize((size, size), Image.BILINEAR)
        x = np.asarray(rgb, np.float32) / 255.0
    except ImportError:
        x = np.random.default_rng(SEED).random((size, size, 3), dtype=np.float32)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    return ((x - mean) / std).astype(np.float32).transpose(2, 0, 1)[None].copy()


def _torchvision(name: str, size: int, **kw):
    """A torchvision model by its builder's name: a classifier, a segmentation model (its "out"
    map), a video classifier (a still clip of 16 frames of the image) or a detector (as
    _detector's, no score threshold, its images resized to SIZE but SSD's, which resize to
    their own: boxes, scores and labels)."""

    def build():
        import torch
        import torchvision

        spaces = (torchvision.models, torchvision.models.segmentation, torchvision.models.video)
        where = next((m for m in spaces if callable(getattr(m, name, None))), None)
        if where is None and callable(getattr(torchvision.models.detection, name, None)):
            # (SSD's builders fix their own image size)
            sized = {} if name.startswith("ssd") else {"min_size": size, "max_size": size}
            return _detector(name, size, True, **sized, **kw)()
        if where is None:
            raise KeyError(f"torchvision has no model builder '{name}'")
        if where is torchvision.models.segmentation:
            kw.setdefault("weights_backbone", None)  # (its default downloads ImageNet weights)
        model = getattr(where, name)(weights=None, **kw)
        x = _image(size)
        if where is torchvision.models.video:
            x = np.ascontiguousarray(np.repeat(x[:, :, None], 16, axis=2))
        if where is torchvision.models.segmentation:

            class Out(torch.nn.Module):
                """The segmentation map alone (not the dict, nor the auxiliary head's)."""

                def __init__(self):
                    super().__init__()
                    self.model = model

                def forward(self, x):
                    return self.model(x)["out"]

            return Out(), (x,), ["x"]
        return model, (x,), ["x"]

    return build


def _detector(name: str, size: int, every_score: bool = False, **kw):
    """A torchvision detector by its builder's name, on one image of SIZE. every_score: no
    score threshold (random weights score every class about 1/91, under the default cut of two-
    stage detectors, which then keep next to nothing to compare)."""

    def build():
        import torch
        import torchvision

        class OneImage(torch.nn.Module):
            """The detector on one CHW image: boxes, scores and labels as a tuple."""

            def __init__(self):
                super().__init__()
                self.backbone = detector.backbone  # for _condition
                self.detector = detector

            def forward(self, x):
                out = self.detector([x])[0]
                return out["boxes"], out["scores"], out["labels"]

        detector = getattr(torchvision.models.detection, name)(
            weights=None, weights_backbone=None, num_classes=91, **kw
        )
        # Random class scores are all about 1/91, a few 1e-8 apart; wider logits spread them.
        # Which of ~300k candidates survive still hangs on rounding near the cut, so detectors
        # are also judged by matching their detections (see _matched).
        # (one-stage heads, `head.classification_head`; a two-stage one's box head is scaled
        # from a pass instead, _calibrate_box_head)
        with torch.no_grad():
            for path, m in detector.named_modules():
                if "classification" in path and isinstance(m, torch.nn.Conv2d | torch.nn.Linear):
                    m.weight.mul_(3.0)
        if every_score:
            heads = getattr(detector, "roi_heads", detector)  # (two-stage: the box head's)
            heads.score_thresh = 0.0
        return OneImage(), (_image(size)[0],), ["x"]

    return build


def _yolov8n():
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel("yolov8n.yaml", verbose=False)
    return model, (_image(320),), ["images"]


def _ultralytics(name: str):
    """An ultralytics model from its own yaml (detection, -seg, -pose, -obb, -cls), its heads
    in their export form (as `yolo export format=onnx` sets them), 320x320 (224 for -cls)."""

    def build():
        from ultralytics.nn import tasks

        kind = name.rsplit("-", 1)[-1] if "-" in name else "det"
        cls = {
            "seg": tasks.SegmentationModel,
            "pose": tasks.PoseModel,
            "obb": tasks.OBBModel,
            "cls": tasks.ClassificationModel,
        }.get(kind, tasks.DetectionModel)
        model = cls(f"{name}.yaml", verbose=False).eval()
        for m in model.modules():
            if hasattr(m, "export"):
                m.export, m.format = True, "onnx"
        return model, (_image(224 if kind == "cls" else 320),), ["images"]

    return build


def _timm(name: str, size: int):
    def build():
        import timm

        return timm.create_model(name, pretrained=False), (_image(size),), ["x"]

    return build


def _raft_small():
    """torchvision's RAFT-small optical flow (GridSample in its correlation lookups), 4 flow
    updates on two 128x128 frames: the last flow."""
    import torch
    import torchvision

    class LastFlow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.raft = torchvision.models.optical_flow.raft_small(weights=None)

        def forward(self, a, b):
            return self.raft(a, b, num_flow_updates=4)[-1]

    a = _image(128)
    b = np.roll(a, (3, -2), axis=(2, 3))  # the same frame moved
    return LastFlow(), (a, b), ["a", "b"]


def _bert2():
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
    )
    torch.manual_seed(SEED)

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(config).eval()

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    rng = np.random.default_rng(SEED)
    ids = rng.integers(1, 1000, (1, 24)).astype(np.int64)
    mask = np.ones((1, 24), np.int64)
    mask[0, 20:] = 0
    return Bert(), (ids, mask), ["input_ids", "attention_mask"]


def _hf(kind: str):
    """A small transformers model from its Config (random weights, eager attention as the ONNX
    exporter takes it): its first two tensor outputs for 12 tokens, a 64x64 image (128x128 for
    DETR), 4,000 audio samples or a 16x100 mel spectrogram."""

    def build():
        import torch
        import transformers as tf

        small = dict(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
        )
        kv = dict(num_key_value_heads=2, vocab_size=1000)
        swin = dict(image_size=64, patch_size=4, embed_dim=32, window_size=4)
        swin.update(depths=[2, 2], num_heads=[2, 4])
        rng = np.random.default_rng(SEED)
        tokens = (rng.integers(0, 1000, (1, 12)).astype(np.int64),), ["input_ids"]
        image = (rng.standard_normal((1, 3, 64, 64)).astype(np.float32),), ["pixel_values"]
        text_models = {
            "gpt2_2l": lambda: tf.GPT2Model(
                tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000)
            ),
            "llama_2l": lambda: tf.LlamaModel(tf.LlamaConfig(**kv, **small)),
            "qwen2_2l": lambda: tf.Qwen2Model(tf.Qwen2Config(**kv, **small)),
            "mistral_2l": lambda: tf.MistralModel(tf.MistralConfig(**kv, **small)),
            "phi_2l": lambda: tf.PhiModel(tf.PhiConfig(vocab_size=1000, **small)),
            "gemma_2l": lambda: tf.GemmaModel(tf.GemmaConfig(head_dim=16, **kv, **small)),
            "distilbert_2l": lambda: tf.DistilBertModel(
                tf.DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=1000)
            ),
            "roberta_2l": lambda: tf.RobertaModel(tf.RobertaConfig(vocab_size=1000, **small)),
            "t5_encoder_2l": lambda: tf.T5EncoderModel(
                tf.T5Config(
                    vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4
                )
            ),  # fmt: skip
            "clip_text_2l": lambda: tf.CLIPTextModel(tf.CLIPTextConfig(vocab_size=1000, **small)),
            "deberta_v2_2l": lambda: tf.DebertaV2Model(
                tf.DebertaV2Config(vocab_size=1000, **small)
            ),
            "albert_2l": lambda: tf.AlbertModel(
                tf.AlbertConfig(embedding_size=32, vocab_size=1000, **small)
            ),
            "electra_2l": lambda: tf.ElectraModel(
                tf.ElectraConfig(embedding_size=32, vocab_size=1000, **small)
            ),
            "mpnet_2l": lambda: tf.MPNetModel(tf.MPNetConfig(vocab_size=1000, **small)),
            "bloom_2l": lambda: tf.BloomModel(
                tf.BloomConfig(vocab_size=1000, hidden_size=64, n_layer=2, n_head=4)
            ),
            "falcon_2l": lambda: tf.FalconModel(
                tf.FalconConfig(
                    vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4
                )
            ),  # fmt: skip
            "gpt_neox_2l": lambda: tf.GPTNeoXModel(tf.GPTNeoXConfig(vocab_size=1000, **small)),
            "opt_2l": lambda: tf.OPTModel(
                tf.OPTConfig(
                    vocab_size=1000,
                    hidden_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    ffn_dim=128,
                    word_embed_proj_dim=64,
                )
            ),  # fmt: skip
            "starcoder2_2l": lambda: tf.Starcoder2Model(tf.Starcoder2Config(**kv, **small)),
            "gpt_bigcode_2l": lambda: tf.GPTBigCodeModel(
                tf.GPTBigCodeConfig(vocab_size=1000, n_embd=64, n_layer=2, n_head=4)
            ),
        }
        image_models = {
            "vit_hf_2l": lambda: tf.ViTModel(tf.ViTConfig(image_size=64, patch_size=16, **small)),
            "deit_2l": lambda: tf.DeiTModel(tf.DeiTConfig(image_size=64, patch_size=16, **small)),
            "swin_hf": lambda: tf.SwinModel(tf.SwinConfig(**swin)),
            "segformer_hf": lambda: tf.SegformerForSemanticSegmentation(
                tf.SegformerConfig(
                    hidden_sizes=[16, 32, 64, 128],
                    depths=[1, 1, 1, 1],
                    decoder_hidden_size=64,
                    num_labels=5,
                )
            ),  # fmt: skip
            "mobilevit_hf": lambda: tf.MobileViTModel(
                tf.MobileViTConfig(
                    image_size=64,
                    hidden_sizes=[32, 48, 64],
                    neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 128],
                )
            ),  # fmt: skip
            "clip_vision_2l": lambda: tf.CLIPVisionModel(
                tf.CLIPVisionConfig(image_size=64, patch_size=16, **small)
            ),
            "convnextv2_hf": lambda: tf.ConvNextV2Model(
                tf.ConvNextV2Config(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])
            ),
            "beit_2l": lambda: tf.BeitModel(
                tf.BeitConfig(
                    image_size=64, patch_size=16, use_relative_position_bias=True, **small
                )
            ),  # fmt: skip
            "dinov2_2l": lambda: tf.Dinov2Model(
                tf.Dinov2Config(image_size=64, patch_size=16, **small)
            ),
            "yolos_2l": lambda: tf.YolosModel(
                tf.YolosConfig(image_size=[64, 64], patch_size=16, num_detection_tokens=5, **small)
            ),
            "swinv2_hf": lambda: tf.Swinv2Model(tf.Swinv2Config(**swin)),
        }
        torch.manual_seed(SEED)
        if kind in text_models:
            model, (example, names) = text_models[kind](), tokens
        elif kind in image_models:
            model, (example, names) = image_models[kind](), image
        elif kind in ("wav2vec2_2l", "hubert_2l"):
            audio = dict(conv_dim=(32, 32), conv_kernel=(10, 3), conv_stride=(5, 2),
                         num_feat_extract_layers=2, num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=4, **small)  # fmt: skip
            if kind == "hubert_2l":
                model = tf.HubertModel(tf.HubertConfig(**audio))
            else:
                model = tf.Wav2Vec2Model(tf.Wav2Vec2Config(vocab_size=32, **audio))
            example = (rng.standard_normal((1, 4000)).astype(np.float32),)
            names = ["input_values"]
        elif kind == "whisper_encoder_2l":
            model = tf.WhisperModel(
                tf.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=1,
                                 encoder_attention_heads=4, decoder_attention_heads=4,
                                 encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                                 max_source_positions=50)
            ).get_encoder()  # fmt: skip
            example = (rng.standard_normal((1, 16, 100)).astype(np.float32),)
            names = ["input_features"]
        else:  # detr
            backbone = tf.ResNetConfig(
                embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]
            )
            model = tf.DetrForObjectDetection(
                tf.DetrConfig(use_timm_backbone=False, backbone_config=backbone, d_model=64,
                              encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                              num_queries=10, num_labels=5, use_pretrained_backbone=False)
            )  # fmt: skip
            example = (rng.standard_normal((1, 3, 128, 128)).astype(np.float32),)
            names = ["pixel_values"]
        model.config._attn_implementation = "eager"
        for module in model.modules():  # (sub-configs built before the setting above)
            if hasattr(module, "config") and hasattr(module.config, "_attn_implementation"):
                module.config._attn_implementation = "eager"

        class Outputs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model.eval()

            def forward(self, *args):
                out = self.model(*args, return_dict=True)
                return tuple([v for v in out.values() if isinstance(v, torch.Tensor)][:2])

        return Outputs(), example, names

    return build


HF = ("gpt2_2l", "llama_2l", "qwen2_2l", "mistral_2l", "phi_2l", "gemma_2l", "distilbert_2l",
      "roberta_2l", "t5_encoder_2l", "clip_text_2l", "vit_hf_2l", "deit_2l", "swin_hf",
      "segformer_hf", "mobilevit_hf", "clip_vision_2l", "wav2vec2_2l", "whisper_encoder_2l",
      "detr_hf", "deberta_v2_2l", "albert_2l", "electra_2l", "mpnet_2l", "bloom_2l", "falcon_2l",
      "gpt_neox_2l", "opt_2l", "starcoder2_2l", "gpt_bigcode_2l", "convnextv2_hf", "beit_2l",
      "dinov2_2l", "yolos_2l", "swinv2_hf", "hubert_2l")  # fmt: skip


def _crnn():
    """A text recognizer as PP-OCR and LPRNet users write it: convs, pooling to one row, a
    bidirectional LSTM over the columns, per-column class scores."""
    import torch
    from torch import nn

    class CRNN(nn.Module):
        def __init__(self, classes: int = 37):
            super().__init__()

            def block(i, o, pool):
                return [
                    nn.Conv2d(i, o, 3, padding=1),
                    nn.BatchNorm2d(o),
                    nn.ReLU(),
                    nn.MaxPool2d(pool),
                ]

            self.cnn = nn.Sequential(
                *block(3, 32, 2), *block(32, 64, 2), *block(64, 96, (2, 1)), *block(96, 96, (4, 1))
            )
            self.rnn = nn.LSTM(96, 64, bidirectional=True, batch_first=False)
            self.fc = nn.Linear(128, classes)

        def forward(self, x):
            f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # (W, N, C)
            y, _ = self.rnn(f)
            return self.fc(y).softmax(-1)

    torch.manual_seed(SEED)
    x = np.random.default_rng(SEED).standard_normal((1, 3, 32, 160)).astype(np.float32)
    return CRNN(), (x,), ["x"]


MODELS = {
    "yolov8n": _yolov8n,
    **{
        name: _ultralytics(name)
        for name in (
            "yolo11n",
            "yolo11n-seg",
            "yolo11n-pose",
            "yolo11n-obb",
            "yolov8n-seg",
            "yolov5nu",
            "yolo11n-cls",
            "yolov10n",
        )
    },  # fmt: skip
    "resnet18": _torchvision("resnet18", 224),
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large", 224),
    "mobilenet_v2": _torchvision("mobilenet_v2", 224),
    "mobilenet_v3_small": _torchvision("mobilenet_v3_small", 224),
    "vit_b_16": _torchvision("vit_b_16", 224),
    "ssdlite320": _detector("ssdlite320_mobilenet_v3_large", 320),
    "retinanet_resnet50_fpn": _detector("retinanet_resnet50_fpn", 320, min_size=320, max_size=320),
    "fasterrcnn_mobilenet_320": _detector("fasterrcnn_mobilenet_v3_large_320_fpn", 320),
    "raft_small": _raft_small,
    "bert2": _bert2,
    **{name: _hf(name) for name in HF},
    "crnn_bilstm": _crnn,
    "efficientnet_b0": _timm("efficientnet_b0", 224),
}


def _build(name: str):
    """MODELS[name], or `timm/NAME` / `torchvision/NAME[@SIZE]`: that library's classifier
    (torchvision's segmentation, video or detection model too) at SIZE (default 224), random
    weights."""
    if name in MODELS:
        return MODELS[name]
    lib, _, rest = name.partition("/")
    arch, _, size = rest.partition("@")
    if lib in ("timm", "torchvision") and arch:
        return (_timm if lib == "timm" else _torchvision)(arch, int(size or 224))
    raise KeyError(name)


def _known(name: str) -> bool:
    try:
        _build(name)
    except (KeyError, ValueError):
        return False
    return True


def _file(onnx_dir: Path, name: str, suffix: str) -> Path:
    return onnx_dir / f"{name.replace('/', '--').replace('@', '-')}{suffix}"


def _dynamic_axes(names: list[str], example) -> dict[str, dict[int, str]]:
    """--dynamic: every input's batch symbolic; a token input's length too; a detector's one
    image (C, H, W) its height and width."""
    axes = {}
    for n, a in zip(names, example, strict=True):
        a = np.asarray(a)
        if a.ndim == 3 and a.shape[0] == 3 and a.dtype.kind == "f":
            axes[n] = {1: f"{n}_h", 2: f"{n}_w"}
        elif a.ndim == 2 and a.dtype.kind == "i":
            axes[n] = {0: "batch", 1: f"{n}_length"}
        elif a.ndim >= 1:
            axes[n] = {0: "batch"}
    return axes


def _other_feeds(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """--dynamic: feeds of other shapes than the example's (a batch of 2, 3 fewer tokens, an
    image cropped), along the axes `_dynamic_axes` made symbolic."""
    out = {}
    for n, a in feeds.items():
        if a.ndim == 3 and a.shape[0] == 3 and a.dtype.kind == "f":
            out[n] = np.ascontiguousarray(a[:, : -a.shape[1] // 8, : -a.shape[2] // 4])
            continue
        if a.ndim == 2 and a.dtype.kind == "i":
            a = a[:, : max(a.shape[1] - 3, 1)]
        other = np.flip(a, axis=-1) if a.ndim >= 2 else a
        out[n] = np.ascontiguousarray(np.concatenate([a, other]))
    return out


def export(name: str, onnx_dir: Path, dynamic: bool = False) -> Path:
    """Build `name` with seeded random weights, condition it, export it (once) to ONNX. In a
    child process: PyTorch's exporter and a software Vulkan driver each load their own LLVM,
    and one process holding both crashes."""
    import subprocess

    path = _file(onnx_dir, name, "-dynamic.onnx" if dynamic else ".onnx")
    if not (path.exists() and _file(onnx_dir, name, ".npz").exists()):
        cmd = [sys.executable, __file__, "--export-only", "--models", name]
        cmd += ["--dynamic"] if dynamic else []
        done = subprocess.run([*cmd, "--onnx-dir", str(onnx_dir)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"exporting {name} failed:\n{done.stderr[-2000:]}")
    return path


def _export_here(name: str, onnx_dir: Path, dynamic: bool = False) -> Path:
    path = _file(onnx_dir, name, "-dynamic.onnx" if dynamic else ".onnx")
    feeds_path = _file(onnx_dir, name, ".npz")
    if path.exists() and feeds_path.exists():
        return path
    import torch

    torch.manual_seed(SEED)
    model, example, names = _build(name)()
    tensors = tuple(torch.from_numpy(np.asarray(a)) for a in example)
    _condition(model, tensors)
    onnx_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            tensors,
            str(path),
            input_names=names,
            opset_version=17,
            dynamo=False,
            dynamic_axes=_dynamic_axes(names, example) if dynamic else None,
        )
    with torch.no_grad():
        outs = {f"o{i}": t for i, t in enumerate(_flat(model(*tensors)))}
        if dynamic:
            other = _other_feeds(dict(zip(names, map(np.asarray, example), strict=True)))
            got = model(*(torch.from_numpy(other[n]) for n in names))
            outs.update({f"other_o{i}": t for i, t in enumerate(_flat(got))})
    np.savez(_file(onnx_dir, name, "-torch.npz"), **outs)
    np.savez(feeds_path, **{n: np.asarray(a) for n, a in zip(names, example, strict=True)})
    return path


def _flat(out) -> list[np.ndarray]:
    """A model's outputs in the order the ONNX export lists them: tuples and lists in order,
    dicts by their values, nested ones flattened."""
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flat(o)]
    if isinstance(out, dict):
        return [a for o in out.values() for a in _flat(o)]
    return [out.detach().cpu().numpy()]


def _torch_reference(onnx_dir: Path, name: str, dynamic: bool) -> tuple[list, list] | None:
    """PyTorch's outputs saved at export (at the example's feeds; at the others' with
    --dynamic), or None where the export predates them."""
    path = _file(onnx_dir, name, "-torch.npz")
    if not path.exists():
        return None
    saved = np.load(path)
    count = sum(k.startswith("o") and k[1:].isdigit() for k in saved.files)
    ref = [saved[f"o{i}"] for i in range(count)]
    other = [saved[f"other_o{i}"] for i in range(count) if f"other_o{i}" in saved.files]
    if dynamic and not other:
        return None
    return ref, [other] if dynamic else []


# -- running --------------------------------------------------------------------------------------


def _rel_err(got: list, ref: list) -> float:
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        if g.shape != r.shape:
            return float("inf")
        if r.size == 0:
            continue
        worst = max(worst, float(np.abs(g - r).max() / max(np.abs(r).max(), 1e-30)))
    return worst


def _matched(got: list, ref: list) -> str | None:
    """For detector outputs (boxes, scores, labels): how many reference detections have a
    tinydl detection of the same label with IoU >= 0.99 (or corners within 1e-3 of the largest
    coordinate) and a score within 1e-3."""
    if len(ref) != 3 or ref[0].ndim != 2 or ref[0].shape[-1] != 4:
        return None
    (gb, gs, gl), (rb, rs, rl) = [np.asarray(a) for a in got], [np.asarray(a) for a in ref]
    if len(rb) == 0:
        return "0/0"
    lo, hi = (
        np.maximum(rb[:, None, :2], gb[None, :, :2]),
        np.minimum(rb[:, None, 2:], gb[None, :, 2:]),
    )
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area_r = np.prod(rb[:, 2:] - rb[:, :2], axis=-1)[:, None]
    area_g = np.prod(gb[:, 2:] - gb[:, :2], axis=-1)[None, :]
    iou = inter / np.maximum(area_r + area_g - inter, 1e-12)
    # (a box of no area, which random weights make, matches by its corners)
    near = np.abs(rb[:, None, :] - gb[None, :, :]).max(-1) <= 1e-3 * max(np.abs(rb).max(), 1.0)
    same = (rl[:, None] == gl[None, :]) & (np.abs(rs[:, None] - gs[None, :]) <= 1e-3)
    return f"{int((((iou >= 0.99) | near) & same).any(axis=1).sum())}/{len(rb)}"


def _median_time(fn, budget: float = 3.0, most: int = 20) -> float:
    fn()
    times = []
    t_end = time.perf_counter() + budget
    while len(times) < 3 or (time.perf_counter() < t_end and len(times) < most):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_model(
    name: str,
    onnx_dir: Path,
    backends: list[str],
    precisions: list[str],
    threads: int | None = None,
    dynamic: bool = False,
) -> list[dict]:
    import onnxruntime as ort

    path = export(name, onnx_dir, dynamic)
    feeds = dict(np.load(_file(onnx_dir, name, ".npz")))
    # --dynamic: the model is also run (and judged) on feeds of other shapes
    others = [_other_feeds(feeds)] if dynamic else []
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    try:
        ref_sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        ref = ref_sess.run(None, feeds)
        other_refs = [ref_sess.run(None, f) for f in others]
        rows = [
            {
                "model": name,
                "backend": "onnxruntime",
                "precision": "fp32",
                "relerr": 0.0,
                "ms": 1e3 * _median_time(lambda: ref_sess.run(None, feeds)),
                "placement": "reference",
            }
        ]
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors: PyTorch's outputs instead
        failed = f"{type(exc).__name__}: {str(exc)[:200]}"
        saved = _torch_reference(onnx_dir, name, dynamic)
        if saved is None:
            return [{"model": name, "backend": "onnxruntime", "error": failed + " (and no "
                     "PyTorch outputs saved with the export: export it again)"}]  # fmt: skip
        ref, other_refs = saved
        rows = [{"model": name, "backend": "onnxruntime", "error": "failed; the reference below "
                 f"is PyTorch's output, saved at export. {failed}"}]  # fmt: skip
    try:
        graph = td.load(path)
    except td.TinyDLError as exc:
        return rows + [{"model": name, "backend": "load", "error": f"{type(exc).__name__}: {exc}"}]
    names = [v.name for v in graph.outputs]
    for backend in backends:
        for precision in precisions:
            row = {"model": name, "backend": backend, "precision": precision}
            rows.append(row)
            try:
                chain = (backend,) if backend == "numpy" else (backend, "numpy")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sess = td.compile(graph, backends=chain, precision=precision, threads=threads)
                out = sess.run(feeds)
                row["relerr"] = _rel_err([out[n] for n in names], ref)
                matched = _matched([out[n] for n in names], ref)
                for f, r in zip(others, other_refs, strict=True):
                    got = [sess.run(f)[n] for n in names]
                    if matched is None:
                        row["relerr"] = max(row["relerr"], _rel_err(got, r))
                    else:  # (detections of equal scores come in either order: matched)
                        more = _matched(got, r)
                        matched += f", {more}"
                if matched is not None:
                    row["matched"] = matched
                row["ms"] = 1e3 * _median_time(lambda: sess.run(feeds))  # noqa: B023
                placed = Counter(sess.placement.nodes.values())
                total = sum(placed.values())
                # (the fallback is the NumPy reference; "cpu" places its nodes as onnxruntime)
                back = "__none__" if backend == "numpy" else "numpy"
                fallback = sorted(
                    {sess.placement.ops[n] for n, b in sess.placement.nodes.items() if b == back}
                )
                named = sorted(set(placed) - {back, backend})
                row["placement"] = (
                    f"{total - placed.get(back, 0)}/{total} on {backend}"
                    + (f" ({', '.join(named)})" if named else "")
                    + (f"; numpy: {', '.join(fallback)}" if fallback else "")
                )
            except Exception as exc:  # noqa: BLE001 - a zoo row reports every failure
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | backend | precision | rel. error vs onnxruntime (or PyTorch, where said) "
        "| ms / run | placement |",
        "|---|---|---|---|---|---|",
        # detectors: "matched k/N" reference detections found (same label, IoU >= 0.99)
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['model']} | {r['backend']} | {r.get('precision', '')} | "
                f"error: {r['error'][:160].replace('|', '/')} | | |"
            )
            continue
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['precision']} | {r['relerr']:.1e}"
            + (f" (matched {r['matched']})" if "matched" in r else "")
            + " | "
            f"{r['ms']:.1f} | {r['placement']} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        default=",".join(MODELS),
        help="comma-separated (default: all); also timm/NAME or torchvision/NAME[@SIZE], any "
        "classifier of those libraries at SIZE (default 224), or torchvision's segmentation, "
        "video or detection model",
    )
    p.add_argument(
        "--backends",
        default=None,
        help="comma-separated tinydl backends (default: numpy, onnxruntime, available GPUs)",
    )
    p.add_argument("--precision", default="fp32", help="comma-separated: fp32, fp16")
    p.add_argument("--onnx-dir", type=Path, default=ROOT / ".zoo", help="exported models (cache)")
    p.add_argument("--export-only", action="store_true", help="export the models and stop")
    p.add_argument(
        "--dynamic",
        action="store_true",
        help="export with symbolic batch (and token length, or a detector's image size) and "
        "run at the example's shapes and at others (batch 2, 3 fewer tokens, a cropped image)",
    )
    p.add_argument(
        "--threads", type=int, help="CPU threads for onnxruntime and tinydl's CPU backends alike"
    )
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(n for n in names if not _known(n))
    if unknown:
        p.error(
            f"unknown models {unknown}; known: {', '.join(MODELS)}, or timm/NAME, "
            "torchvision/NAME[@SIZE]"
        )
    rows: list[dict] = []
    if not args.export_only:
        if args.backends:
            backends = args.backends.split(",")
        else:
            backends = [b.name for b in td.list_backends() if b.available]
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        try:
            if args.export_only:
                print(_export_here(name, args.onnx_dir, args.dynamic))
                continue
            rows += run_model(
                name,
                args.onnx_dir,
                backends,
                args.precision.split(","),
                args.threads,
                args.dynamic,
            )
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built is a row too
            rows.append(
                {"model": name, "backend": "export", "error": f"{type(exc).__name__}: {exc}"}
            )
    if args.export_only:
        for r in rows:
            print(f"{r['model']}: {r['error']}", file=sys.stderr)
        return 1 if rows else 0
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    if importlib.util.find_spec("onnxruntime") is None:
        sys.exit("tools/zoo.py needs onnxruntime (the reference): pip install onnxruntime")
    sys.exit(main())
