"""Videos of evaluated episodes: an environment's ``rgb_array`` frames written as MP4 with
imageio's ffmpeg writer (``pip install jaxflow-rl[video]``)."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from jaxflow import envs
from jaxflow.config.fields import ConfigError

DEFAULT_FPS = 30
RENDER_MODE = "rgb_array"
MACRO_BLOCK = 16
"""ffmpeg's H.264 encoder works on 16x16 blocks: frames are padded to a multiple of it."""


def video_env(config: Any, seed: int) -> Any:
    """``config.env`` made to render ``rgb_array`` frames (gymnasium and ``ALE/`` ids; JAX
    envs have no renderer here), or a :class:`ConfigError` saying why it cannot."""
    kind = envs.entry(config.env).kind
    if kind != "gymnasium":
        raise ConfigError(f"--video records gymnasium and ALE environments; {config.env!r} is a {kind} environment.")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")  # pygame's renderers need no sound card
    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")  # nor a display (no XDG_RUNTIME_DIR error)
    env = envs.make_cpu(config.env, envs.EnvContext(seed=seed), **dict(config.env_config, render_mode=RENDER_MODE))
    if RENDER_MODE not in env.metadata.get("render_modes", ()):
        env.close()
        raise ConfigError(f"--video: {config.env!r} cannot render {RENDER_MODE} frames.")
    return env


class EpisodeVideo:
    """One episode's frames, written to ``path`` (MP4) on :meth:`close`.

    Example:
        >>> video = EpisodeVideo("videos/episode_000.mp4", fps=50)  # doctest: +SKIP
        >>> video.add(env.render()); video.close()                   # doctest: +SKIP
    """

    def __init__(self, path: str, fps: int = DEFAULT_FPS):
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401 - the writer's ffmpeg, checked here to say what is missing
        except ImportError:
            raise ConfigError("--video needs imageio-ffmpeg: pip install 'jaxflow-rl[video]'.") from None
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._writer = imageio.get_writer(path, fps=fps, macro_block_size=1)
        self.frames = 0

    def add(self, frame: Any) -> None:
        with warnings.catch_warnings():
            # The first frame starts ffmpeg: a fork that execs at once, which JAX's fork warning does not mean.
            warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
            self._writer.append_data(_padded(np.asarray(frame, np.uint8)))
        self.frames += 1

    def close(self) -> None:
        self._writer.close()


def _padded(frame: np.ndarray) -> np.ndarray:
    """``frame`` with black rows and columns added up to a multiple of :data:`MACRO_BLOCK`."""
    h, w = frame.shape[:2]
    pad = ((0, -h % MACRO_BLOCK), (0, -w % MACRO_BLOCK), (0, 0))
    return np.pad(frame, pad) if any(p[1] for p in pad) else frame
