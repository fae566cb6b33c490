"""`flashinfer.cake_causal_conv1d_det_train_kcp`: the seed's full name works with and without
FlashInfer, and never shadows or changes a real FlashInfer.

Three levels:
* in this process (cake installed or on PYTHONPATH): the four names are cake's objects;
* in subprocesses with a stand-in FlashInfer package (a regular package, like
  flashinfer-python's) in the same or another site directory, in either order on the path;
* with pip, when $CAKE_WHEEL names the built wheel (`make test-python` sets it): install cake
  and a stand-in flashinfer wheel into a fresh venv in either order, uninstall either, and check
  who owns which file;
* with the real flashinfer-python where it is installed (scripts/install-python-deps.sh puts
  it in the tests' venv, without its CUDA dependencies: it is only imported).
"""
import base64
import hashlib
import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import pytest

import cake

NAME = "flashinfer.cake_causal_conv1d_det_train_kcp"
NAMES = ["cake_causal_conv1d_det_kcp", "cake_causal_conv1d_det_multi_kcp", "ContextDetKcp",
         "RecomputeHandleDetKcp"]
PYTHON_DIR = pathlib.Path(__file__).resolve().parents[1]  # python/ of the checkout


def _hook_dir():
    """Where _cake_flashinfer.py is: beside the installed cake, else the checkout's python/site."""
    installed = pathlib.Path(cake.__file__).resolve().parents[1]
    if (installed / "_cake_flashinfer.py").exists():
        return installed
    return PYTHON_DIR / "site"


def _real_flashinfer():
    """The directory of the flashinfer package this interpreter would import, or None."""
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def _ships_the_module(package_dir):
    return (package_dir / "cake_causal_conv1d_det_train_kcp.py").exists()


def _site_without_flashinfer(tmp_path):
    """This interpreter's site-packages as links, less flashinfer-python and cake: an
    environment where torch imports and FlashInfer is absent, whatever is installed here."""
    import sysconfig
    skip = ("flashinfer", "cake", "_cake_flashinfer")
    out = tmp_path / "site-without-flashinfer"
    out.mkdir()
    for key in ("purelib", "platlib"):
        for entry in pathlib.Path(sysconfig.get_paths()[key]).iterdir():
            if not entry.name.replace("-", "_").startswith(skip) and \
                    not (out / entry.name).exists():
                (out / entry.name).symlink_to(entry)
    return out


def _run(code, *path, env_extra=None, isolated=None):
    """Runs `code` in a fresh interpreter whose sys.path starts with `path` (site dirs: their
    .pth files are processed); returns its stdout. With `isolated` (a _site_without_flashinfer
    dir) the interpreter's own site-packages are replaced by it (python -S)."""
    dirs = [str(p) for p in path] + ([str(isolated)] if isolated else [])
    prelude = textwrap.dedent(f"""
        import site, sys
        for d in reversed({dirs!r}):
            site.addsitedir(d)
            sys.path.remove(d)
            sys.path.insert(0, d)
    """)
    env = dict(os.environ, **(env_extra or {}))
    env.pop("PYTHONPATH", None)
    flags = ["-S"] if isolated else []
    run = subprocess.run([sys.executable, *flags, "-c", prelude + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _cake_site(tmp_path):
    """A site dir holding cake as `pip install .` lays it out: the package, the hook module and
    its .pth (copied from wherever this cake lives)."""
    import shutil
    site_dir = tmp_path / "cake-site"
    shutil.copytree(pathlib.Path(cake.__file__).parent, site_dir / "cake",
                    ignore=shutil.ignore_patterns("__pycache__"))
    hook = _hook_dir()
    shutil.copy(hook / "_cake_flashinfer.py", site_dir)
    shutil.copy(hook / "cake-flashinfer.pth", site_dir)
    return site_dir


def _stub_flashinfer(root):
    """A stand-in for flashinfer-python: a regular package with a submodule."""
    pkg = root / "flashinfer"
    (pkg / "mamba").mkdir(parents=True)
    (pkg / "__init__.py").write_text("STUB = 'the real FlashInfer'\n__version__ = '0.0.stub'\n")
    (pkg / "mamba" / "__init__.py").write_text("")
    (pkg / "mamba" / "cake_selective_state_update.py").write_text("OWN = True\n")
    return root


def test_names_are_cakes_in_this_process():
    real = _real_flashinfer()
    if real is not None and _ships_the_module(real):
        pytest.skip(f"the FlashInfer here ({real}) ships {NAME} itself, which wins "
                    "(test_with_the_real_flashinfer); cake's is checked without it")
    if importlib.util.find_spec("_cake_flashinfer") is None:
        sys.path.insert(0, str(_hook_dir()))
    import _cake_flashinfer  # noqa: F401  (installed by the .pth after pip install)
    mod = importlib.import_module(NAME)
    assert sorted(mod.__all__) == sorted(NAMES)
    for name in NAMES:
        assert getattr(mod, name) is getattr(cake, name), name
    # the documented import form
    exec(f"from {NAME} import cake_causal_conv1d_det_multi_kcp as f; "
         f"assert f is cake.cake_causal_conv1d_det_multi_kcp", {"cake": cake})


CHECK = """
    import importlib, importlib.util
    import cake
    before = importlib.util.find_spec("flashinfer")
    print("flashinfer before:", None if before is None else before.origin)
    from flashinfer.cake_causal_conv1d_det_train_kcp import (ContextDetKcp,
        RecomputeHandleDetKcp, cake_causal_conv1d_det_kcp, cake_causal_conv1d_det_multi_kcp)
    assert cake_causal_conv1d_det_multi_kcp is cake.cake_causal_conv1d_det_multi_kcp
    assert ContextDetKcp is cake.ContextDetKcp
    import flashinfer
    print("flashinfer:", getattr(flashinfer, "STUB", None), list(flashinfer.__path__))
    if getattr(flashinfer, "STUB", None):
        from flashinfer.mamba import cake_selective_state_update as own
        assert own.OWN
"""


def test_without_flashinfer_detection_still_says_absent(tmp_path):
    out = _run(CHECK, _cake_site(tmp_path), isolated=_site_without_flashinfer(tmp_path))
    # importlib.util.find_spec("flashinfer"), FlashInfer detection in vLLM and SGLang, is not
    # fooled by cake being installed
    assert "flashinfer before: None" in out, out
    assert "flashinfer: None []" in out, out


@pytest.mark.parametrize("order", ["flashinfer first", "cake first"])
def test_flashinfer_in_another_site_dir(tmp_path, order):
    stub = _stub_flashinfer(tmp_path / "fi-site")
    site_dir = _cake_site(tmp_path)
    dirs = (stub, site_dir) if order == "flashinfer first" else (site_dir, stub)
    out = _run(CHECK, *dirs, isolated=_site_without_flashinfer(tmp_path))
    assert f"flashinfer before: {stub / 'flashinfer' / '__init__.py'}" in out, out
    assert f"flashinfer: the real FlashInfer ['{stub / 'flashinfer'}']" in out, out


def test_flashinfer_in_the_same_site_dir(tmp_path):
    site_dir = _cake_site(tmp_path)
    _stub_flashinfer(site_dir)
    out = _run(CHECK, site_dir, isolated=_site_without_flashinfer(tmp_path))
    assert f"flashinfer: the real FlashInfer ['{site_dir / 'flashinfer'}']" in out, out


def test_flashinfer_that_ships_the_module_itself_wins(tmp_path):
    """A FlashInfer that ships this module (flashinfer-python 0.7.4 does) has its own imported,
    not cake's."""
    site_dir = _cake_site(tmp_path)
    stub = _stub_flashinfer(tmp_path / "fi-site")
    (stub / "flashinfer" / "cake_causal_conv1d_det_train_kcp.py").write_text("OWN = 'fi'\n")
    out = _run("""
        import flashinfer.cake_causal_conv1d_det_train_kcp as m
        print("own:", getattr(m, "OWN", None))
    """, stub, site_dir, isolated=_site_without_flashinfer(tmp_path))
    assert "own: fi" in out, out


# ---- pip: install, uninstall, either order -------------------------------------------------

def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _stub_wheel(directory):
    """A pure-Python wheel of a stand-in `flashinfer-python` (regular package)."""
    files = {
        "flashinfer/__init__.py": b"STUB = 'the real FlashInfer'\n",
        "flashinfer/mamba/__init__.py": b"",
        "flashinfer/mamba/cake_selective_state_update.py": b"OWN = True\n",
        "flashinfer_python-0.0.1.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.0.1\n",
        "flashinfer_python-0.0.1.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: cake-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    path = directory / "flashinfer_python-0.0.1-py3-none-any.whl"
    record = "flashinfer_python-0.0.1.dist-info/RECORD"
    with zipfile.ZipFile(path, "w") as z:
        lines = []
        for name, data in files.items():
            z.writestr(name, data)
            lines.append(_record_line(name, data))
        lines.append(f"{record},,")
        z.writestr(record, "\n".join(lines) + "\n")
    return path


def _clean_env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture
def venv(tmp_path):
    wheel = os.environ.get("CAKE_WHEEL")
    if not wheel:
        pytest.skip("CAKE_WHEEL (the built cake wheel) is not set; `make test-python` sets it")
    root = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site_dir = pathlib.Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, env=_clean_env()).stdout.strip())

    def pip(*args):
        run = subprocess.run([sys.executable, "-m", "pip", "--python", str(python),
                              "--disable-pip-version-check", "--no-input", *args],
                             capture_output=True, text=True, timeout=300, env=_clean_env())
        assert run.returncode == 0, run.stdout + run.stderr

    def probe():
        """What the venv's interpreter sees (cake is not imported: that venv has no torch)."""
        run = subprocess.run([str(python), "-c", textwrap.dedent("""
            import importlib.util, sys
            fi = importlib.util.find_spec("flashinfer")
            print("flashinfer:", None if fi is None else fi.origin)
            try:
                spec = importlib.util.find_spec("flashinfer.cake_causal_conv1d_det_train_kcp")
            except ImportError as e:
                spec = None
            print("cake module:", None if spec is None else spec.origin)
            if fi is not None and fi.origin:
                import flashinfer, flashinfer.mamba.cake_selective_state_update as own
                print("stub intact:", flashinfer.STUB == "the real FlashInfer" and own.OWN)
        """)], capture_output=True, text=True, timeout=60, env=_clean_env())
        assert run.returncode == 0, run.stdout + run.stderr
        return run.stdout

    return pip, probe, pathlib.Path(wheel), _stub_wheel(tmp_path), site_dir


@pytest.mark.parametrize("cake_first", [True, False])
def test_pip_install_and_uninstall_either_order(venv, cake_first):
    pip, probe, cake_wheel, stub_wheel, site_dir = venv
    ours = site_dir / "cake" / "_flashinfer_module.py"
    stub_init = site_dir / "flashinfer" / "__init__.py"
    first, second = (cake_wheel, stub_wheel) if cake_first else (stub_wheel, cake_wheel)
    pip("install", "--no-deps", "--no-index", str(first))
    pip("install", "--no-deps", "--no-index", str(second))
    out = probe()
    assert f"flashinfer: {stub_init}" in out and f"cake module: {ours}" in out, out
    assert "stub intact: True" in out, out
    assert not (site_dir / "flashinfer" / "cake_causal_conv1d_det_train_kcp.py").exists()
    pip("uninstall", "-y", "flashinfer-python")
    out = probe()
    # FlashInfer gone: no `flashinfer` package left behind, cake's module still importable
    # by name (the probe's find_spec of the dotted name is such an import)
    assert "flashinfer: None" in out and f"cake module: {ours}" in out, out
    assert not (site_dir / "flashinfer").exists()
    pip("install", "--no-deps", "--no-index", str(stub_wheel))
    pip("uninstall", "-y", "cake")
    out = probe()
    assert f"flashinfer: {stub_init}" in out and "cake module: None" in out, out
    assert "stub intact: True" in out, out
    assert not (site_dir / "_cake_flashinfer.py").exists()
    assert not (site_dir / "cake-flashinfer.pth").exists()


# ---- the real FlashInfer ------------------------------------------------------------------

def test_with_the_real_flashinfer():
    """Where flashinfer-python is installed (the tests' venv): it is untouched; the seed's name
    is FlashInfer's own module where FlashInfer ships one (0.7.4 does: its Blackwell kernels,
    another API), else cake's names come through it. cake's own names stay cake's."""
    import importlib.metadata
    try:
        version = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flashinfer-python is not installed")
    real = _real_flashinfer()
    assert real is not None, f"flashinfer-python {version} is installed but not importable"
    ships = _ships_the_module(real)
    out = _run(f"""
        import importlib.metadata, importlib.util, pathlib
        spec = importlib.util.find_spec("flashinfer")
        import flashinfer
        print("origin:", spec.origin, getattr(flashinfer, "__version__", "?"))
        import cake
        import cake.causal_conv1d_det_train_kcp as ours
        import flashinfer.cake_causal_conv1d_det_train_kcp as m
        assert flashinfer.__spec__.origin == spec.origin   # still FlashInfer's own package
        if {ships!r}:   # FlashInfer's module, untouched: its file, its functions
            assert pathlib.Path(m.__file__).parent == pathlib.Path(spec.origin).parent, m.__file__
            assert m.cake_causal_conv1d_det_multi_kcp is not cake.cake_causal_conv1d_det_multi_kcp
        else:
            assert m.cake_causal_conv1d_det_multi_kcp is cake.cake_causal_conv1d_det_multi_kcp
        assert ours.cake_causal_conv1d_det_multi_kcp is cake.cake_causal_conv1d_det_multi_kcp
        print("ok")
    """, *([] if (pathlib.Path(cake.__file__).parents[1] / "_cake_flashinfer.py").exists()
           else [_hook_dir(), PYTHON_DIR]))
    assert "ok" in out, out
