"""Which Kubernetes API calls a server can make, read from its source (no import, no run).

From an entry module, follow every import (module level or inside functions) into the
first-party packages and kubernetes-asyncio's leader election (its LeaseLock makes Lease calls),
then find in each module:

- calls of kubernetes-asyncio's generated API methods (``patch_node``,
  ``create_namespaced_event``, ``read_namespaced_config_map``, ...), resolved to their REST path
  and HTTP method by reading the generated ``*_api.py`` of the API classes the code names
  (``CoreV1Api``, ``EventsV1Api``, ...); a ``list_*`` method passed uncalled (to
  ``watch.Watch().stream``) or called with ``watch=True`` also watches;
- raw ``call_api(path, method)`` calls, the path a literal, an f-string or, when it is an
  expression, every API-path literal of the module; a module that builds a ``watch`` query
  parameter also watches what it lists;
- calls of the methods of migfit.kube's ``KubeClient`` (the project's one API module), each
  resolved from the ``self._request(METHOD, path)`` / ``self._list(path)`` call in its body;
  its raw ``open_get(path, ...)`` is a GET of ``path``, read like ``call_api``. The API module's
  own body counts only through the methods that reachable code calls.

Each call becomes ``(apiGroup, resource, verb)`` as RBAC spells it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

FIRST_PARTY = ("migfit", "webhook", "extender", "certs")
FOLLOWED_LIBRARIES = ("kubernetes_asyncio.leaderelection",)
_API_PATH = re.compile(r"^/apis?/")
_API_CLASS = re.compile(r"^[A-Z][A-Za-z0-9]*Api$")
_CALL_API = re.compile(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'")
KUBE_MODULE = "migfit.kube"
KUBE_CLASS = "KubeClient"
KUBE_RAW_GET = "open_get"


@dataclasses.dataclass(frozen=True, order=True, slots=True)
class Call:
    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.group or 'core'}/{self.resource}:{self.verb}"


@dataclasses.dataclass(frozen=True, slots=True)
class Site:
    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.what}"


class Unresolved(Exception):
    """A call the scanner cannot map to an RBAC verb: make it explicit in the code."""


@dataclasses.dataclass(frozen=True, slots=True)
class Module:
    name: str
    path: Path
    tree: ast.Module


def module_path(name: str, *, root: Path) -> Path | None:
    """The source file of module ``name``: first-party under ``root``, else the library's."""
    if name.split(".")[0] in FIRST_PARTY:
        base = root.joinpath(*name.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None
    if any(name == lib or name.startswith(lib + ".") for lib in FOLLOWED_LIBRARIES):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            return None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            return Path(spec.origin)
    return None


def _followed(name: str) -> bool:
    return name.split(".")[0] in FIRST_PARTY or any(
        name == lib or name.startswith(lib + ".") for lib in FOLLOWED_LIBRARIES)


def _imports(module: Module) -> Iterator[str]:
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield target
            for alias in node.names:
                yield f"{target}.{alias.name}"


def closure(roots: Iterable[str], *, root: Path) -> list[Module]:
    """``roots`` and every module they import, transitively, that the scanner follows."""
    seen: dict[str, Module] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or not _followed(name):
            continue
        # "import a.b.c" also runs a and a.b.
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        path = module_path(name, root=root)
        if path is None:
            continue
        module = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
        seen[name] = module
        todo.extend(_imports(module))
    return sorted(seen.values(), key=lambda m: m.name)


@functools.cache
def api_methods(class_name: str) -> dict[str, tuple[str, str]]:
    """kubernetes-asyncio's generated ``class_name``: method -> (REST path, HTTP method)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).lower()
    spec = importlib.util.find_spec(f"kubernetes_asyncio.client.api.{snake}")
    if spec is None or not spec.origin:
        return {}
    source = Path(spec.origin).read_text(encoding="utf-8")
    methods: dict[str, tuple[str, str]] = {}
    for chunk in source.split("\n    def ")[1:]:
        name = chunk.split("(", 1)[0]
        found = _CALL_API.search(chunk)
        if name.endswith("_with_http_info") and found:
            methods[name.removesuffix("_with_http_info")] = (found.group(1), found.group(2))
    return methods


def rbac_call(path: str, method: str, *, watch: bool) -> set[Call]:
    """The RBAC (group, resource, verb)s a request to ``path`` with ``method`` needs."""
    segments = [s for s in path.split("?")[0].strip("/").split("/") if s]
    if segments[:1] == ["api"] and len(segments) >= 2:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, rest = segments[1], segments[3:]
    else:
        raise Unresolved(f"not a Kubernetes API path: {path!r}")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest or len(rest) > 3:
        raise Unresolved(f"cannot read a resource from {path!r}")
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    collection = len(rest) == 1
    verbs = {
        ("GET", True): {"list"}, ("POST", True): {"create"},
        ("DELETE", True): {"deletecollection"}, ("GET", False): {"get"},
        ("PUT", False): {"update"}, ("PATCH", False): {"patch"},
        ("DELETE", False): {"delete"}, ("POST", False): {"create"},  # subresource: binding
    }.get((method.upper(), collection))
    if verbs is None:
        raise Unresolved(f"{method} {path}: no RBAC verb for it")
    if watch and method.upper() == "GET":
        verbs = verbs | {"watch"}
    return {Call(group, resource, verb) for verb in verbs}


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _api_classes(tree: ast.AST) -> set[str]:
    return {n for node in ast.walk(tree) if (n := _name_of(node)) and _API_CLASS.match(n)}


def _receiver_classes(tree: ast.AST) -> dict[str, str]:
    """``name -> ApiClass`` for names assigned an Api instance or annotated with an Api type."""
    found: dict[str, str] = {}

    def api_of(node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Call):
            node = node.func
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name: str | None = node.value.rsplit(".", 1)[-1]
        else:
            name = _name_of(node) if node is not None else None
        return name if name and _API_CLASS.match(name) else None

    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        cls = None
        if isinstance(node, ast.Assign):
            targets, cls = list(node.targets), api_of(node.value)
        elif isinstance(node, ast.AnnAssign):
            targets, cls = [node.target], api_of(node.annotation) or api_of(node.value)
        elif isinstance(node, ast.arg):
            cls = api_of(node.annotation)
            if cls:
                found[node.arg] = cls
        for target in targets:
            if cls and (name := _name_of(target)):
                found[name] = cls
    return found


def _string_literals(tree: ast.AST) -> set[str]:
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def _builds_watch_query(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value == "watch":
            return True
        if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "watch" for k in node.keys):
            return True
    return False


def _path_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{x}"
                       for v in node.values)
    return None


def _arg(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def kube_methods(module: Module) -> dict[str, frozenset[Call]]:
    """migfit.kube's ``KubeClient``: public method -> the RBAC calls it makes."""
    methods: dict[str, frozenset[Call]] = {}
    for cls in module.tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == KUBE_CLASS):
            continue
        for fn in cls.body:
            if not isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef) \
                    or fn.name.startswith("_") or fn.name == KUBE_RAW_GET:
                continue
            calls: set[Call] = set()
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "self"):
                    continue
                if node.func.attr == "_request" and len(node.args) >= 2:
                    method_node, path_node = node.args[0], node.args[1]
                elif node.func.attr == "_list" and node.args:
                    method_node, path_node = ast.Constant("GET"), node.args[0]
                else:
                    continue
                text = _path_text(path_node)
                if not (isinstance(method_node, ast.Constant) and text):
                    raise Unresolved(f"{module.path}:{node.lineno}: {fn.name}: give "
                                     "_request a literal method and a literal or f-string path")
                calls |= rbac_call(text, str(method_node.value), watch=False)
            if calls:
                methods[fn.name] = frozenset(calls)
    return methods


def calls_in(module: Module, *, all_classes: set[str],
             kube: dict[str, frozenset[Call]] | None = None) -> dict[Call, list[Site]]:
    """Every API call of one module, with where it is made (``kube``: kube_methods)."""
    found: dict[Call, list[Site]] = {}
    if module.name == KUBE_MODULE:
        return found  # counted where its methods are called
    kube = kube or {}
    tree = module.tree
    receivers = _receiver_classes(tree)
    module_classes = _api_classes(tree) or all_classes
    watches = _builds_watch_query(tree)
    called: set[int] = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    calls_by_func = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}

    def add(calls: set[Call], node: ast.AST, what: str) -> None:
        for c in calls:
            found.setdefault(c, []).append(Site(module.path, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        call = calls_by_func.get(id(node))
        if node.attr in kube and call is not None:
            add(set(kube[node.attr]), node, f"{KUBE_CLASS}.{node.attr}")
            continue
        if node.attr in ("call_api", KUBE_RAW_GET) and call is not None:
            if node.attr == KUBE_RAW_GET:
                method_node: ast.AST | None = ast.Constant("GET")
                path_node = _arg(call, 0, "path")
            else:
                method_node, path_node = _arg(call, 1, "method"), _arg(call, 0, "resource_path")
            if not (isinstance(method_node, ast.Constant) and isinstance(method_node.value, str)):
                raise Unresolved(f"{module.path}:{node.lineno}: call_api with a computed method")
            text = _path_text(path_node) if path_node is not None else None
            paths = [text] if text else sorted(
                s for s in _string_literals(tree) if _API_PATH.match(s))
            if not paths:
                raise Unresolved(f"{module.path}:{node.lineno}: call_api path not found")
            for p in paths:
                add(rbac_call(p, method_node.value, watch=watches), node,
                    f"call_api {method_node.value} {p}")
            continue
        method = node.attr.removesuffix("_with_http_info")
        receiver = _name_of(node.value) if not isinstance(node.value, ast.Call) else None
        candidates = {receivers[receiver]} if receiver in receivers else module_classes
        targets = {(cls, api_methods(cls)[method]) for cls in sorted(candidates)
                   if method in api_methods(cls)}
        if not targets and candidates is not all_classes:
            targets = {(cls, api_methods(cls)[method]) for cls in sorted(all_classes)
                       if method in api_methods(cls)}
        if not targets:
            continue
        resolved = set()
        for cls, (path, http) in targets:
            watch = http == "GET" and method.startswith("list_") and (
                id(node) not in called or any(
                    k.arg == "watch" for k in (call.keywords if call else [])))
            resolved.add((cls, frozenset(rbac_call(path, http, watch=watch))))
        if len({calls for _, calls in resolved}) > 1:
            raise Unresolved(
                f"{module.path}:{node.lineno}: {method} could be any of "
                f"{sorted(c for c, _ in resolved)}: name the receiver's type (x: EventsV1Api)")
        cls, calls = next(iter(resolved))
        add(set(calls), node, f"{cls}.{method}")
    return found


def server_calls(roots: Iterable[str], *, root: Path) -> dict[Call, list[Site]]:
    """Every API call the code reachable from ``roots`` can make."""
    modules = closure(roots, root=root)
    all_classes = set().union(*(_api_classes(m.tree) for m in modules)) if modules else set()
    kube = next((kube_methods(m) for m in modules if m.name == KUBE_MODULE), {})
    calls: dict[Call, list[Site]] = {}
    for module in modules:
        for call, sites in calls_in(module, all_classes=all_classes, kube=kube).items():
            calls.setdefault(call, []).extend(sites)
    return calls
