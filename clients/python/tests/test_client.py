"""The client against a running platform (``MAPI_URL``, ``MAPI_TOKEN`` of the
``dev`` tenant's admin, ``MAPI_TENANT``/``MAPI_PROJECT``), as
``tests/tests/python_client.rs`` starts it. Standard library only, with
pandas (Debian's) for the DataFrame paths."""

import json
import os
import struct
import unittest
import zlib

import pandas

import mapi_client
from mapi_client.oidc import dev_idp_login

LONGLEY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "longley.csv")


def png():
    raw = b"\x00\x10\x20\x30"

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class Platform(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = mapi_client.Client()
        cls.dataset = cls.client.upload(LONGLEY, name="longley")["id"]
        cls.fit = cls.client.submit("tabular.linear", cls.dataset, params={"y": "employed"}, name="py-fit",
                                    tags=["python"]).wait(timeout=300)

    def test_a_fit_is_followed_to_its_end_with_progress_and_its_metrics_read(self):
        seen = []
        run = self.client.submit("tabular.linear", self.dataset, params={"y": "employed", "x": ["gnp"]})
        run.wait(timeout=300, on_progress=lambda r: seen.append((r.state, r.progress)))
        self.assertEqual(run.state, "succeeded")
        self.assertEqual(seen[-1], ("succeeded", 1.0))
        self.assertGreater(len(seen), 1, seen)
        self.assertAlmostEqual(self.fit.metrics["r_squared"], 0.995479, places=5)
        self.assertEqual(self.fit.data["name"], "py-fit")

    def test_the_log_is_in_words_and_outputs_download_without_the_token(self):
        lines = self.fit.logs()
        self.assertTrue(any(line.endswith("complete") for line in lines), lines)
        self.assertFalse(any("mapi_event" in line for line in lines), lines)
        raw = self.fit.logs(words=False)
        self.assertTrue(any("mapi_event" in line for line in raw))
        self.assertIn("model.json", self.fit.outputs())
        model = self.fit.output_json("model.json")
        self.assertIn("coefficients", model)

    def test_tracking_logs_metrics_params_and_images(self):
        run = self.client.submit("describe", self.dataset).wait(timeout=300)
        for step, loss in enumerate([0.9, 0.5, 0.3]):
            run.log_metric("loss", loss, step=step)
        run.log_metrics({"auc": 0.8, "f1": 0.7}, step=3)
        run.log_param("seed", 7)
        run.log_image("curve.png", png(), step=3)
        history = run.history()
        self.assertEqual([p["value"] for p in history["series"]["loss"]], [0.9, 0.5, 0.3])
        self.assertEqual(history["params"], {"seed": 7})
        self.assertEqual(history["images"]["curve.png"]["content_type"], "image/png")
        self.assertEqual(run.refresh().metrics["loss"], 0.3)

    def test_runs_compare_into_rows_and_a_dataframe(self):
        other = self.client.submit("tabular.linear", self.dataset, params={"y": "employed", "x": ["year"]})
        other.wait(timeout=300)
        rows = self.client.compare([self.fit.id, other.id])
        self.assertEqual([(r["id"], r["name"]) for r in rows], [(self.fit.id, "py-fit"), (other.id, None)])
        frame = self.client.compare_frame([self.fit.id, other.id])
        self.assertIsInstance(frame, pandas.DataFrame)
        self.assertEqual(frame.loc[other.id, "params.x"], ["year"])
        self.assertGreater(frame.loc[self.fit.id, "metrics.r_squared"], frame.loc[other.id, "metrics.r_squared"])

    def test_the_runs_list_filters_and_carries_chosen_columns(self):
        runs = self.client.runs(tag="python", columns="metrics.r_squared,params.y")
        self.assertEqual([r["id"] for r in runs], [self.fit.id])
        self.assertEqual(runs[0]["values"]["params.y"], "employed")

    def test_a_dataframe_uploads_as_a_dataset(self):
        frame = pandas.DataFrame({"x": [1, 2, 3, 4], "y": [2.0, 4.1, 5.9, 8.2]})
        ds = self.client.upload(frame, name="frame.csv")
        self.assertEqual(ds["rows"], 4)
        run = self.client.submit("tabular.linear", ds["id"], params={"y": "y"}).wait(timeout=300)
        self.assertEqual(run.state, "succeeded")

    def test_an_item_job_is_submitted_and_its_results_iterated(self):
        job = self.client.submit_items("item.echo", [{"n": i} for i in range(5)]).wait(timeout=300)
        self.assertEqual(job.state, "succeeded")
        self.assertEqual(job.counts["succeeded"], 5)
        items = list(job.items())
        self.assertEqual(sorted(i["idx"] for i in items), [0, 1, 2, 3, 4])

    def test_an_endpoint_scores_a_dataframe(self):
        self.client.deploy("py-ep", self.fit.data["model_version"])
        self.client.wait_endpoint("py-ep", timeout=120)
        rows = pandas.read_csv(LONGLEY).drop(columns=["employed"]).head(3)
        predictions = self.client.score("py-ep", rows)
        self.assertEqual(len(predictions), 3)
        self.assertTrue(all(55000 < p < 75000 for p in predictions), predictions)

    def test_a_refusal_is_an_exception_with_the_problems_code_and_detail(self):
        with self.assertRaises(mapi_client.MapiError) as caught:
            self.client.submit("tabular.linear", self.dataset, params={"y": "nope"})
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "INVALID_ARGUMENT"))
        self.assertIn("nope", caught.exception.detail)
        with self.assertRaises(mapi_client.MapiError) as caught:
            self.client.run("run_01arz3ndektsv4rrffq69g5fav")
        self.assertEqual(caught.exception.code, "NOT_FOUND")

    def test_a_wrong_token_says_to_sign_in_again(self):
        stranger = mapi_client.Client(token="mapi_not_a_token")
        with self.assertRaises(mapi_client.MapiError) as caught:
            stranger.whoami()
        self.assertEqual(caught.exception.status, 401)
        self.assertIn("mapi login", caught.exception.detail)

    def test_a_platform_that_is_not_there_is_named_with_the_cause(self):
        gone = mapi_client.Client("http://127.0.0.1:9", token="x", tenant="dev", project="default")
        with self.assertRaises(mapi_client.MapiError) as caught:
            gone.runs()
        self.assertEqual(caught.exception.code, "UNAVAILABLE")
        self.assertIn("refused", caught.exception.detail.lower())

    def test_the_dev_identity_provider_signs_a_person_in(self):
        token = dev_idp_login(self.client.url, "dev@dev.local")
        me = mapi_client.Client(token=token).whoami()
        self.assertEqual(me["user"], "dev@dev.local")


if __name__ == "__main__":
    unittest.main()
