"""The component library. Each module opens with a docstring listing its Inputs, Outputs,
Options and an example; `Component.registry` finds them by class name (YAML `type:`)."""

from tinydl.pipeline.components.batch import Batch, Unbatch
from tinydl.pipeline.components.collect import Collect
from tinydl.pipeline.components.color_convert import ColorConvert
from tinydl.pipeline.components.crop import Crop
from tinydl.pipeline.components.draw import Draw, DrawPose
from tinydl.pipeline.components.image_source import ImageSource
from tinydl.pipeline.components.inference import Inference
from tinydl.pipeline.components.memory_source import MemorySource
from tinydl.pipeline.components.metrics import Metrics
from tinydl.pipeline.components.ocr import (
    CropBoxes,
    LinesJson,
    TextCrops,
    TextDirection,
    TextRecognize,
)
from tinydl.pipeline.components.pose import PoseDetector, PoseLandmarker, PoseTracker
from tinydl.pipeline.components.resize import Resize
from tinydl.pipeline.components.streams import GroupByRequest, SplitByFlow
from tinydl.pipeline.components.synthetic_source import SyntheticSource
from tinydl.pipeline.components.text_boxes import TextBoxes
from tinydl.pipeline.components.transfer import ToDevice, ToHost
from tinydl.pipeline.components.video_sink import VideoSink
from tinydl.pipeline.components.video_source import VideoSource

__all__ = [
    "Batch",
    "Collect",
    "ColorConvert",
    "Crop",
    "CropBoxes",
    "Draw",
    "DrawPose",
    "GroupByRequest",
    "ImageSource",
    "Inference",
    "MemorySource",
    "LinesJson",
    "Metrics",
    "PoseDetector",
    "PoseLandmarker",
    "PoseTracker",
    "Resize",
    "SplitByFlow",
    "SyntheticSource",
    "TextBoxes",
    "TextCrops",
    "TextDirection",
    "TextRecognize",
    "ToDevice",
    "ToHost",
    "Unbatch",
    "VideoSink",
    "VideoSource",
]
