"""The client: HTTP with the standard library, the platform's resources as
methods, and the API's problems as exceptions."""

from __future__ import annotations

import io
import json
import os
import pathlib
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._words import event_in_words

Json = Any
FINAL_RUN_STATES = ("succeeded", "failed", "partial", "cancelled")
FINAL_JOB_STATES = ("succeeded", "failed", "completed_with_errors")


class MapiError(Exception):
    """What the platform refused, or why it could not be asked.

    ``status`` is the HTTP status (0 when no answer came), ``code`` the
    problem's stable code (``NOT_FOUND``, ``QUOTA_EXCEEDED``, ``UNAVAILABLE``
    …) and ``detail`` what to fix, in the API's words.
    """

    def __init__(self, status: int, code: str, detail: str, problem: Optional[Mapping[str, Json]] = None):
        super().__init__(f"{code} ({status}): {detail}" if status else f"{code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem = dict(problem or {})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered to the caller: a download's bytes are fetched
    without the token, which is for the platform only."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401, N802
        return None


def _config_dir() -> Optional[pathlib.Path]:
    for var, tail in (("MAPI_CONFIG_DIR", ()), ("XDG_CONFIG_HOME", ("mapi",)), ("HOME", (".config", "mapi"))):
        value = os.environ.get(var)
        if value:
            return pathlib.Path(value, *tail)
    return None


def _read_json(path: Optional[pathlib.Path]) -> Dict[str, Json]:
    try:
        return json.loads(path.read_bytes()) if path else {}
    except (OSError, ValueError):
        return {}


def _resolve(url: Optional[str], token: Optional[str], tenant: Optional[str], project: Optional[str]):
    """URL, token, tenant and project, first found wins (as the CLI finds them)."""
    saved = _read_json(_config_dir() / "credentials.json" if _config_dir() else None)
    dev = _read_json(pathlib.Path(os.environ.get("MAPI_HOME") or ".mapi") / "credentials.json")
    url = url or os.environ.get("MAPI_URL") or saved.get("current") or dev.get("url")
    if not url:
        raise MapiError(0, "NOT_CONFIGURED", "no platform: pass url=, set MAPI_URL, sign in with `mapi login`, "
                        "or start one with `mapi dev`")
    url = url.rstrip("/")
    entry = (saved.get("platforms") or {}).get(url) or {}
    from_dev = dev if dev.get("url", "").rstrip("/") == url else {}
    token = token or os.environ.get("MAPI_TOKEN") or entry.get("token") or from_dev.get("token")
    tenant = tenant or os.environ.get("MAPI_TENANT") or entry.get("tenant") or from_dev.get("tenant")
    project = project or os.environ.get("MAPI_PROJECT") or entry.get("project") or from_dev.get("project")
    return url, token, tenant, project


class Client:
    """One platform, one identity, one project (``tenant``/``project``).

    >>> client = Client()                      # as the CLI would act
    >>> client = Client("https://mapi.example.com", token="mapi_…", tenant="acme", project="churn")
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, tenant: Optional[str] = None,
                 project: Optional[str] = None, timeout: float = 30.0):
        self.url, self.token, self.tenant, self.project = _resolve(url, token, tenant, project)
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirect)

    # --- HTTP ---------------------------------------------------------------

    def request(self, method: str, path: str, body: Json = None, *, query: Optional[Mapping[str, Any]] = None,
                data: Optional[bytes] = None, content_type: Optional[str] = None) -> Json:
        """Calls the API; the answer's JSON (``None`` when empty), or raises :class:`MapiError`."""
        answer, _ = self._send(method, path, body, query=query, data=data, content_type=content_type)
        return json.loads(answer) if answer else None

    def _send(self, method, path, body=None, *, query=None, data=None, content_type=None):
        url = self.url + path
        if query:
            pairs = {k: v for k, v in query.items() if v is not None}
            url += "?" + urllib.parse.urlencode(pairs, doseq=True)
        if body is not None:
            data, content_type = json.dumps(body).encode(), "application/json"
        req = urllib.request.Request(url, data=data, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with self._opener.open(req, timeout=self.timeout) as r:
                return r.read(), r.headers
        except urllib.error.HTTPError as e:
            if e.code in (301, 302, 303, 307, 308):
                return b"", e.headers
            raise _problem(e) from None
        except urllib.error.URLError as e:
            reason = getattr(e, "reason", e)
            raise MapiError(0, "UNAVAILABLE", f"the platform at {self.url} could not be reached ({reason}); "
                            "is it running (`mapi dev`) and is MAPI_URL right?") from e
        except OSError as e:
            raise MapiError(0, "UNAVAILABLE", f"the platform at {self.url} did not answer ({e})") from e

    def _project(self, tail: str = "") -> str:
        if not (self.tenant and self.project):
            raise MapiError(0, "NOT_CONFIGURED", "no tenant and project: pass tenant= and project=, "
                            "set MAPI_TENANT and MAPI_PROJECT, or choose them with `mapi use TENANT/PROJECT`")
        return f"/v1/tenants/{self.tenant}/projects/{self.project}{tail}"

    def whoami(self) -> Json:
        return self.request("GET", "/v1/whoami")

    # --- datasets -----------------------------------------------------------

    def upload(self, source: Union[str, os.PathLike, "Any"], name: Optional[str] = None) -> Json:
        """Uploads a CSV file (a path) or a pandas DataFrame as a dataset; its description."""
        if hasattr(source, "to_csv"):
            buffer = io.StringIO()
            source.to_csv(buffer, index=False)
            data, name = buffer.getvalue().encode(), name or "dataframe.csv"
        else:
            path = pathlib.Path(source)
            data, name = path.read_bytes(), name or path.name
        return self.request("POST", self._project("/datasets"), query={"name": name}, data=data,
                            content_type="text/csv")

    def datasets(self) -> List[Json]:
        return self.request("GET", self._project("/datasets"))["datasets"]

    # --- runs ---------------------------------------------------------------

    def submit(self, method: str, dataset: str, params: Optional[Mapping[str, Json]] = None, *,
               resource_class: str = "S", timeout_s: int = 3600, name: Optional[str] = None,
               tags: Optional[Sequence[str]] = None, experiment: Optional[str] = None) -> "Run":
        """Submits a run of ``method`` on ``dataset`` (an id or a name); labels it if asked."""
        spec = {"method": method, "dataset": dataset, "params": dict(params or {}), "class": resource_class,
                "timeout_s": timeout_s}
        run = Run(self, self.request("POST", self._project("/runs"), spec))
        labels = {k: v for k, v in (("name", name), ("tags", list(tags) if tags else None),
                                    ("experiment", experiment)) if v is not None}
        if labels:
            run.data = self.request("PATCH", f"/v1/runs/{run.id}", labels)
        return run

    def run(self, run_id: str) -> "Run":
        return Run(self, self.request("GET", f"/v1/runs/{run_id}"))

    def runs(self, *, limit: int = 50, **filters: Any) -> List[Json]:
        """The project's runs, newest first: ``state=``, ``method=``, ``tag=``,
        ``experiment=``, ``metric="r2>0.9"``, ``view=``, ``columns="params.x,metrics.r2"``."""
        found: List[Json] = []
        token = None
        while len(found) < limit:
            page = self.request("GET", self._project("/runs"),
                                query={**filters, "page_size": min(200, limit - len(found)), "page_token": token})
            found.extend(page["runs"])
            token = page.get("next_page_token")
            if not token:
                break
        return found

    def compare(self, run_ids: Sequence[str]) -> List[Dict[str, Json]]:
        """The runs side by side, one row per run: its id, name, method,
        state and charge, each param (``params.*``) and metric (``metrics.*``)."""
        return [self.run(i).row() for i in run_ids]

    def compare_frame(self, run_ids: Sequence[str]):
        """:meth:`compare` as a pandas DataFrame indexed by run id (needs pandas)."""
        try:
            import pandas
        except ImportError as e:
            raise ImportError("compare_frame needs pandas: pip install 'mapi-client[pandas]'") from e
        return pandas.DataFrame(self.compare(run_ids)).set_index("id")

    # --- item jobs ----------------------------------------------------------

    def submit_items(self, method: str, items: Sequence[Json], params: Optional[Mapping[str, Json]] = None) -> "Job":
        body: Dict[str, Json] = {"method": method, "items": list(items)}
        if params:
            body["options"] = {"params": dict(params)}
        return Job(self, self.request("POST", self._project("/jobs"), body))

    def job(self, job_id: str) -> "Job":
        return Job(self, self.request("GET", f"/v1/jobs/{job_id}"))

    # --- endpoints ----------------------------------------------------------

    def deploy(self, alias: str, model_version: str, **options: Any) -> Json:
        """Deploys a model version as the endpoint ``alias`` (options as the API takes them)."""
        return self.request("POST", self._project("/endpoints"), {"alias": alias, "model_version": model_version,
                                                                   **options})

    def endpoint(self, alias: str) -> Json:
        return self.request("GET", self._project(f"/endpoints/{alias}"))

    def wait_endpoint(self, alias: str, timeout: float = 300.0) -> Json:
        """Waits until the endpoint is ready; raises when it failed or took longer."""
        deadline = time.monotonic() + timeout
        while True:
            ep = self.endpoint(alias)
            if ep["status"] == "ready":
                return ep
            if ep["status"] == "failed":
                raise MapiError(0, "FAILED_PRECONDITION", f"endpoint {alias} failed: {ep.get('message')}")
            if time.monotonic() > deadline:
                raise MapiError(0, "DEADLINE_EXCEEDED", f"endpoint {alias} was not ready in {timeout:.0f} s")
            time.sleep(0.5)

    def score(self, alias: str, rows, *, std_errors: bool = False) -> List[float]:
        """Scores rows (a list of dicts, or a pandas DataFrame) on an endpoint; the predictions in order."""
        if hasattr(rows, "to_dict"):
            rows = rows.to_dict(orient="records")
        answer = self.request("POST", self._project(f"/endpoints/{alias}:score"),
                              {"rows": list(rows), "std_errors": std_errors})
        return [p["value"] for p in answer["predictions"]]


class _Resource:
    """A run or a job: its view (``data``, as the API's ``GET`` answers it)."""

    _collection = ""  # `runs` or `jobs`

    def __init__(self, client: Client, data: Json):
        self.client, self.data = client, data

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.state}>"

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def state(self) -> str:
        return self.data["state"]

    def refresh(self):
        self.data = self.client.request("GET", f"/v1/{self._collection}/{self.id}")
        return self


class Run(_Resource):
    """A run: its view (``data``, as ``GET /v1/runs/{id}`` answers) and what can be done with it."""

    _collection = "runs"

    @property
    def done(self) -> bool:
        return self.state in FINAL_RUN_STATES

    @property
    def progress(self) -> float:
        return (self.data.get("progress") or {}).get("fraction", 0.0)

    @property
    def metrics(self) -> Dict[str, float]:
        """What the method reported, with what people logged over it."""
        reported = dict((self.data.get("progress") or {}).get("metrics") or {})
        reported.update(self.data.get("logged_metrics") or {})
        return reported

    @property
    def params(self) -> Dict[str, Json]:
        params = dict(self.data.get("params") or {})
        params.update(self.data.get("logged_params") or {})
        return params

    def wait(self, timeout: float = 3600.0, *, on_progress: Optional[Callable[["Run"], None]] = None,
             every: float = 0.5) -> "Run":
        """Waits until the run is final, calling ``on_progress(run)`` when its state or progress changes."""
        return _wait(self, lambda r: r.done, lambda r: (r.state, r.progress), timeout, on_progress, every)

    def cancel(self) -> "Run":
        self.data = self.client.request("POST", f"/v1/runs/{self.id}/cancel")
        return self

    def retry(self) -> "Run":
        return Run(self.client, self.client.request("POST", f"/v1/runs/{self.id}/retry"))

    def logs(self, *, attempt: Optional[int] = None, words: bool = True) -> List[str]:
        """What the attempt printed, the worker's events in words (as ``mapi runs logs`` prints them)."""
        lines: List[str] = []
        cursor = ""
        while True:
            page = self.client.request("GET", f"/v1/runs/{self.id}/logs",
                                       query={"attempt": attempt, "cursor": cursor or None, "limit": 1000})
            for line in page["lines"]:
                text = line["text"]
                lines.append((event_in_words(text) or text) if words else text)
            if not page.get("more") or not page.get("cursor") or page["cursor"] == cursor:
                return lines
            cursor = page["cursor"]

    def outputs(self) -> List[str]:
        return [o["name"] for o in self.data.get("outputs") or []]

    def output(self, name: str) -> bytes:
        """An output's bytes (the API counts the download; the bytes come from where it sends)."""
        _, headers = self.client._send("GET", f"/v1/runs/{self.id}/outputs/{name}")
        location = headers.get("Location")
        if not location:
            raise MapiError(0, "INTERNAL", f"the download of {name} was not redirected")
        if location.startswith("/"):
            location = self.client.url + location
        with urllib.request.urlopen(location, timeout=self.client.timeout) as r:
            return r.read()

    def output_json(self, name: str) -> Json:
        return json.loads(self.output(name))

    # --- tracking ---------------------------------------------------------------

    def log_metric(self, name: str, value: float, step: Optional[int] = None) -> None:
        point: Dict[str, Json] = {"name": name, "value": value}
        if step is not None:
            point["step"] = step
        self.log(metrics=[point])

    def log_metrics(self, values: Mapping[str, float], step: Optional[int] = None) -> None:
        self.log(metrics=[{"name": k, "value": v, **({"step": step} if step is not None else {})}
                          for k, v in values.items()])

    def log_param(self, name: str, value: Json) -> None:
        self.log(params={name: value})

    def log(self, *, metrics: Sequence[Mapping[str, Json]] = (), params: Optional[Mapping[str, Json]] = None) -> None:
        self.client.request("POST", f"/v1/runs/{self.id}/log", {"metrics": list(metrics), "params": dict(params or {})})

    def log_image(self, name: str, image: Union[bytes, str, os.PathLike], step: Optional[int] = None) -> None:
        """Logs a PNG, JPEG, WebP or GIF (bytes or a path) to the run."""
        data = image if isinstance(image, bytes) else pathlib.Path(image).read_bytes()
        self.client.request("PUT", f"/v1/runs/{self.id}/images/{name}", query={"step": step}, data=data,
                            content_type="application/octet-stream")

    def history(self) -> Json:
        """Every logged point of every metric series, and the logged params and images."""
        return self.client.request("GET", f"/v1/runs/{self.id}/log")

    def row(self) -> Dict[str, Json]:
        """The run as one row of a comparison."""
        row: Dict[str, Json] = {"id": self.id, "name": self.data.get("name"),
                                "method": self.data["method"], "state": self.state,
                                "charged_micros": self.data["cost"]["charged_micros"]}
        row.update({f"params.{k}": v for k, v in self.params.items()})
        row.update({f"metrics.{k}": v for k, v in self.metrics.items()})
        return row


class Job(_Resource):
    """An item job: its view (``data``) and its items."""

    _collection = "jobs"

    @property
    def counts(self) -> Dict[str, int]:
        return self.data["counts"]

    def wait(self, timeout: float = 3600.0, *, on_progress: Optional[Callable[["Job"], None]] = None,
             every: float = 0.5) -> "Job":
        """Waits until the job is over, calling ``on_progress(job)`` when its state or counts change."""
        done = lambda j: j.state in FINAL_JOB_STATES  # noqa: E731
        return _wait(self, done, lambda j: (j.state, tuple(sorted(j.counts.items()))), timeout, on_progress, every)

    def items(self, state: Optional[str] = None) -> Iterator[Json]:
        """Every finished item (``state="failed"`` for the failed only), page by page."""
        token = None
        while True:
            page = self.client.request("GET", f"/v1/jobs/{self.id}/items",
                                       query={"state": state, "page_token": token})
            yield from page["items"]
            token = page.get("next_page_token")
            if not token:
                return

    def retry_failed(self) -> "Job":
        self.data = self.client.request("POST", f"/v1/jobs/{self.id}/retry-failed")
        return self


def _wait(thing, done, seen_of, timeout, on_progress, every):
    """Refreshes ``thing`` (a run or a job) until ``done(thing)``, calling
    ``on_progress(thing)`` whenever ``seen_of(thing)`` changes; raises when
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    seen = None
    while True:
        now = seen_of(thing)
        if on_progress and now != seen:
            on_progress(thing)
        seen = now
        if done(thing):
            return thing
        if time.monotonic() > deadline:
            kind = type(thing).__name__.lower()
            raise MapiError(0, "DEADLINE_EXCEEDED", f"{kind} {thing.id} is still {thing.state} after {timeout:.0f} s")
        time.sleep(every)
        thing.refresh()


def _problem(e: urllib.error.HTTPError) -> MapiError:
    body = e.read()
    try:
        problem = json.loads(body)
        code, detail = problem.get("code", str(e.code)), problem.get("detail", "")
    except ValueError:
        problem, code, detail = None, str(e.code), body.decode(errors="replace")[:200] or e.reason
    if e.code == 401:
        detail += " (sign in again: `mapi login`, or set MAPI_TOKEN to a valid token)"
    return MapiError(e.code, code, detail, problem)
