"""The official nuscenes-devkit, where it installs (tests and cross-checks only)."""
import pytest

try:
    import nuscenes  # noqa: F401
    HAVE_DEVKIT = True
except ImportError:
    HAVE_DEVKIT = False

needs_devkit = pytest.mark.skipif(not HAVE_DEVKIT, reason="nuscenes-devkit is not installed "
                                  "(pip install --no-deps nuscenes-devkit after pyquaternion, shapely, matplotlib)")
