"""The walkthrough in Python: upload the Longley data, fit employment on it,
follow the fit, read its metrics and log, log a metric of your own, and
compare two fits."""

import mapi_client

client = mapi_client.Client()  # the platform and token `mapi dev` wrote for the CLI
dataset = client.upload("examples/longley.csv", name="longley")
print("uploaded", dataset["id"], dataset["rows"], "rows")

fits = []
for x in (["gnp"], ["gnp", "population"]):
    run = client.submit("tabular.linear", dataset["id"], params={"y": "employed", "x": x})
    run.wait(on_progress=lambda r: print(f"  {r.id} {r.state} {r.progress:.0%}"))
    print(run.id, run.state, "r_squared", round(run.metrics["r_squared"], 6))
    fits.append(run)

print(fits[1].logs()[-1])  # the log in words, as `mapi runs logs` prints it
model = fits[1].output_json("model.json")
print("coefficients", [c["name"] for c in model["coefficients"]])

fits[1].log_metric("holdout_rmse", 412.5)
for row in client.compare([r.id for r in fits]):
    print(row["id"], row["params.x"], round(row["metrics.r_squared"], 6), row.get("metrics.holdout_rmse"))
