"""batchlab's side of the Python engine boundary, run inside the embedded interpreter first.

It checks the interpreter, makes the engines batchlab ships importable, and imports the protocol
class a scenario names. Engine-specific code lives in the engines (python/batchlab_engines/).
"""

import importlib
import importlib.abc
import importlib.util
import multiprocessing
import os
import sys
import sysconfig

PROTOCOL_METHODS = ("start", "generate", "shutdown")


def prepare(venv, env, built_in):
    """Checks that this interpreter is the venv's, applies `env` and installs `built_in`.

    `env` values are final (Rust already let the user's values win); they are set again here
    because os.environ is a snapshot taken when the interpreter started. `built_in` is a list of
    (module name, file name, source).
    """
    for key, value in env.items():
        os.environ[key] = value
    venv = os.path.realpath(venv)
    prefix = os.path.realpath(sys.prefix)
    if prefix != venv:
        raise RuntimeError(
            f"the embedded Python is not the venv's: sys.prefix is {sys.prefix} "
            f"(Python {sys.version.split()[0]}, executable {sys.executable}), expected {venv}"
        )
    # The venv's packages first, so nothing from the base interpreter shadows them.
    purelib = sysconfig.get_paths()["purelib"]
    if purelib in sys.path:
        sys.path.remove(purelib)
    sys.path.insert(0, purelib)
    # Engines that spawn processes (vLLM's multiprocess mode) spawn them with sys.executable.
    multiprocessing.set_executable(os.path.join(sys.prefix, "bin", "python"))
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _BuiltIn)]
    sys.meta_path.insert(0, _BuiltIn(built_in))


class _BuiltIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the modules compiled into batchlab, ahead of anything on sys.path."""

    def __init__(self, modules):
        self.modules = {name: (file, source) for name, file, source in modules}
        packages = {name.rpartition(".")[0] for name in self.modules}
        self.packages = {p for p in packages if p}

    def find_spec(self, name, path=None, target=None):
        if name not in self.modules:
            return None
        file, _ = self.modules[name]
        return importlib.util.spec_from_loader(name, self, origin=file, is_package=name in self.packages)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        file, source = self.modules[module.__name__]
        module.__file__ = file
        exec(compile(source, file, "exec"), module.__dict__)


def load_class(module, name, path):
    """Imports `module` (with `path` first on sys.path, when given) and returns its class `name`,
    checked to have the protocol's methods."""
    if path is not None:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"engine.python.path {path} is not a directory")
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module and not module.startswith(f"{e.name}."):
            raise
        where = f"in {path}" if path is not None else "(no engine.python.path given)"
        raise ModuleNotFoundError(f"no module `{module}` {where}; sys.path is {sys.path}") from e
    cls = getattr(mod, name, None)
    if cls is None:
        found = sorted(n for n in vars(mod) if isinstance(getattr(mod, n), type) and not n.startswith("_"))
        raise AttributeError(f"module `{module}` ({mod.__file__}) has no class `{name}`; its classes: {found}")
    missing = [m for m in PROTOCOL_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise TypeError(f"`{module}:{name}` lacks the protocol method(s) {', '.join(missing)}; see docs/engines.md")
    return cls
