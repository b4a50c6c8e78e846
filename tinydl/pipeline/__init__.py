"""The pipeline framework: apps are DAGs of components joined by bounded queues.

    from tinydl.pipeline import App
    from tinydl.pipeline.components import SyntheticSource, Resize, Collect

    app = App("demo")
    app.add("src", SyntheticSource(count=50))
    app.add("small", Resize(width=64, height=36))
    app.add("out", Collect())
    app.connect("src", "small")
    app.connect("small", "out")
    print(app.run(timeout=30))       # frames in = out + dropped + errored, and a profile table

See docs/pipeline.md. Modules: packet (Packet and payload types), component (Component,
Context, ComponentRunner), app (App), queues, runtime (thread executor), process (process
executor), accounting, profiler, config (YAML and Markdown apps), profile / deploy / simulate
(the deployer: measure, plan, predict), components/ (the library).
"""

from tinydl.pipeline.app import App
from tinydl.pipeline.component import Component, ComponentRunner, Context, Later
from tinydl.pipeline.deploy import Deployment, deploy
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import (
    Batch,
    DeviceTensor,
    Frame,
    Landmarks,
    Packet,
    Quads,
    Rects,
    T,
    Tensor,
    Text,
)
from tinydl.pipeline.profile import Profile, profile
from tinydl.pipeline.profiler import RunReport

__all__ = [
    "App",
    "Batch",
    "Component",
    "ComponentRunner",
    "Context",
    "Deployment",
    "DeviceTensor",
    "Frame",
    "Landmarks",
    "Later",
    "Packet",
    "PipelineError",
    "Profile",
    "Quads",
    "Rects",
    "RunReport",
    "T",
    "Tensor",
    "Text",
    "deploy",
    "profile",
]
