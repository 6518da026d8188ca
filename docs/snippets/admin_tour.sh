#!/usr/bin/env bash
# The administration walkthrough of Administration v0.3, against `mapi dev`:
# an operator creates a tenant, its admin creates a project, adds a person
# and mints a token; the operator suspends and reactivates the tenant, sets
# its quotas and the kill switches; both read the audit log. Every refusal the guide describes is checked.
#
#   MAPI_URL=http://127.0.0.1:8080 docs/snippets/admin_tour.sh
#
# The test suite runs it against a fresh `mapi dev` (tests/tests/admin_tour.rs).
set -euo pipefail
MAPI=${MAPI:-mapi}
export MAPI_URL=${MAPI_URL:?set MAPI_URL to the platform (the URL mapi dev prints)}
TENANT=${TENANT:-acme}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

say() { printf '\n## %s\n' "$*"; }
fail() { echo "admin tour FAILED: $*" >&2; exit 1; }
# refused CODE CMD…: the command must fail, and its error must carry CODE.
refused() {
  local code=$1; shift
  if "$@" >"$WORK/out" 2>&1; then fail "expected $code from: $*"; fi
  grep -q "$code" "$WORK/out" || { cat "$WORK/out" >&2; fail "expected $code from: $*"; }
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }

say "Sign in through the development identity provider"
OPERATOR=$($MAPI login --dev admin@dev.local --print-token)
TENANT_ADMIN=$($MAPI login --dev analyst@dev.local --print-token)
PERSON=$($MAPI login --dev viewer@dev.local --print-token)
MAPI_TOKEN=$OPERATOR $MAPI whoami | tee "$WORK/me"
grep -q "operator" "$WORK/me" || fail "admin@dev.local is not an operator"

say "Only operators create tenants"
refused FORBIDDEN env MAPI_TOKEN="$TENANT_ADMIN" $MAPI admin tenants create "$TENANT" --name "Acme Retail" --tier verified --residency eu --yes
MAPI_TOKEN=$OPERATOR $MAPI admin tenants create "$TENANT" --name "Acme Retail" --tier verified \
  --residency eu --admin-email analyst@dev.local --yes
MAPI_TOKEN=$OPERATOR $MAPI admin tenants ls | tee "$WORK/tenants"
grep -q "^$TENANT " "$WORK/tenants" || fail "the new tenant is not listed"
refused ALREADY_EXISTS env MAPI_TOKEN="$OPERATOR" $MAPI admin tenants create "$TENANT" --name Again --tier public --residency eu --yes

say "The tenant admin creates a project and adds a person"
export MAPI_TOKEN=$TENANT_ADMIN
$MAPI login --dev analyst@dev.local >/dev/null   # claims the invitation
$MAPI api POST "/v1/tenants/$TENANT/projects" -d '{"id": "growth", "name": "Growth marketing"}' >/dev/null
$MAPI api POST "/v1/tenants/$TENANT/projects/growth/members" -d '{"email": "viewer@dev.local", "role": "runner"}' >/dev/null
$MAPI api GET "/v1/tenants/$TENANT/projects/growth/members" | json "' '.join(m['email'] + ':' + m['role'] for m in d['items'])" | tee "$WORK/members"
grep -q "viewer@dev.local:runner" "$WORK/members" || fail "the member was not added"
refused INVALID_ARGUMENT $MAPI api POST "/v1/tenants/$TENANT/projects/growth/members" -d '{"email": "x@dev.local", "role": "viewer", "reviewer": true}'
# The person sees the project, but not the tenant's members list (tenant-wide only).
MAPI_TOKEN=$PERSON $MAPI api GET "/v1/tenants/$TENANT/projects/growth" >/dev/null
refused FORBIDDEN env MAPI_TOKEN="$PERSON" $MAPI api GET "/v1/tenants/$TENANT/members"

say "A token: scoped, shown once, revocable"
$MAPI use "$TENANT/growth"
$MAPI tokens create nightly-report -s models:read --expires-in-days 30 --rate-limit 60 \
  --budget 3600 --budget-period day > "$WORK/nightly-report.token"
$MAPI tokens ls | tee "$WORK/tokens"
grep -q nightly-report "$WORK/tokens" || fail "the token is not listed"
REPORT=$(cat "$WORK/nightly-report.token")
MAPI_TOKEN=$REPORT $MAPI whoami | grep -q "models:read" || fail "the token does not carry its scope"
MAPI_TOKEN=$REPORT $MAPI api GET "/v1/tenants/$TENANT/projects/growth/runs" >/dev/null
refused FORBIDDEN env MAPI_TOKEN="$REPORT" $MAPI api POST "/v1/tenants/$TENANT/projects/growth/datasets" -d '{}'
refused FORBIDDEN env MAPI_TOKEN="$REPORT" $MAPI admin audit --tenant "$TENANT"
refused FORBIDDEN env MAPI_TOKEN="$REPORT" $MAPI tokens create another -s admin
ID=$($MAPI --json tokens ls | json "[t['id'] for t in d['tokens'] if t['name'] == 'nightly-report'][0]")
$MAPI tokens revoke "$ID" --yes
refused UNAUTHENTICATED env MAPI_TOKEN="$REPORT" $MAPI whoami

say "Operators suspend and reactivate a tenant"
refused INVALID_ARGUMENT env MAPI_TOKEN="$OPERATOR" $MAPI admin tenants update "$TENANT" --status suspended --yes
MAPI_TOKEN=$OPERATOR $MAPI admin tenants update "$TENANT" --status suspended --reason "contract ended" --yes
$MAPI api GET "/v1/tenants/$TENANT/projects/growth" >/dev/null
refused FORBIDDEN $MAPI api POST "/v1/tenants/$TENANT/projects" -d '{"id": "later", "name": "Later"}'
MAPI_TOKEN=$OPERATOR $MAPI admin tenants update "$TENANT" --status active --yes
$MAPI api POST "/v1/tenants/$TENANT/projects" -d '{"id": "later", "name": "Later"}' >/dev/null

say "Quotas: operators set them; runs are estimated and refused; usage shows how near they are"
refused FORBIDDEN $MAPI admin quotas ls
MAPI_TOKEN=$OPERATOR $MAPI admin quotas set tenant "$TENANT" --vcpu-seconds-per-day 172800 \
  --concurrent-runs 40 --max-fanout-tasks 256 --storage 200GiB --note "private beta customer" --yes
MAPI_TOKEN=$OPERATOR $MAPI admin quotas ls | tee "$WORK/quotas"
grep -Eq "^$TENANT +verified +172800 .* 40 +256 +L .*yes" "$WORK/quotas" || fail "the override is not listed"
printf 'x,y\n1,2\n2,3\n3,5\n' > "$WORK/small.csv"
DS=$($MAPI --json datasets upload "$WORK/small.csv" | json "d['id']")
$MAPI runs submit --method describe --dataset "$DS" --class M --timeout 600 --dry-run | tee "$WORK/dry"
grep -q "would be admitted; estimate" "$WORK/dry" || fail "a dry run of class M was not admitted"
refused INVALID_ARGUMENT $MAPI runs submit --method describe --dataset "$DS" --class XL --timeout 60 --dry-run
refused INVALID_ARGUMENT $MAPI runs submit --method describe --dataset "$DS" --class XL --timeout 60
$MAPI usage --tenant "$TENANT" --period day | tee "$WORK/usage"
grep -q "quota concurrent_runs .* of 40" "$WORK/usage" || fail "usage does not show the quotas"
grep -q "estimates" "$WORK/usage" || fail "usage does not say its amounts are estimates"
MAPI_TOKEN=$OPERATOR $MAPI admin quotas rm tenant "$TENANT" --yes
MAPI_TOKEN=$OPERATOR $MAPI admin quotas ls | grep -Eq "^$TENANT +verified +86400 " || fail "the tier's defaults are not back"

say "Kill switches: operators only, always with a reason"
refused FORBIDDEN $MAPI admin kill-switches get
MAPI_TOKEN=$OPERATOR $MAPI admin kill-switches set --uploaded-code off --spend-cap 250.5 --spend-cap-period day \
  --reason "tour: incident drill" --yes
MAPI_TOKEN=$OPERATOR $MAPI admin kill-switches get | tee "$WORK/switches"
grep -q "uploaded code: off" "$WORK/switches" || fail "uploaded code is not off"
grep -q "250.500000 USD per day" "$WORK/switches" || fail "the spend cap is not set"
$MAPI runs submit --method describe --dataset "$DS" --class S --timeout 60 | grep -q "submitted" \
  || fail "built-in methods stop working with uploaded code off"
MAPI_TOKEN=$OPERATOR $MAPI admin kill-switches set --uploaded-code on --spend-cap 0 --reason "tour: drill over" --yes
MAPI_TOKEN=$OPERATOR $MAPI admin audit --action kill_switch.set | grep -q "tour: incident drill" \
  || fail "the kill switch change is not audited with its reason"

say "Executors: health, the shared-tier gate, the operators' switch"
refused FORBIDDEN $MAPI admin executors ls
MAPI_TOKEN=$OPERATOR $MAPI admin executors ls | tee "$WORK/executors"
grep -q "^local-process  enabled  isolation process" "$WORK/executors" || fail "the local executor is not listed"
grep -q "shared tiers: closed (isolation process is weaker than gvisor)" "$WORK/executors" \
  || fail "the gate does not say why shared tiers are closed"
MAPI_TOKEN=$OPERATOR $MAPI admin executors disable local-process --reason "tour: containment drill" --yes | grep -q "is disabled" \
  || fail "the executor was not disabled"
MAPI_TOKEN=$OPERATOR $MAPI admin executors enable local-process --reason "tour: drill over" | grep -q "is enabled" \
  || fail "the executor was not enabled again"
MAPI_TOKEN=$OPERATOR $MAPI admin audit --action executor.disable | grep -q "containment drill" \
  || fail "the executor switch is not audited with its reason"

say "The audit log"
$MAPI admin audit --tenant "$TENANT" | tee "$WORK/audit"
for action in tenant.create membership.create token.create token.revoke tenant.suspend tenant.activate project.create quota.set quota.denied quota.remove; do
  grep -q " $action " "$WORK/audit" || fail "the audit log misses $action"
done
grep -q "denied" "$WORK/audit" || fail "the audit log misses the refusals"
[ "$($MAPI admin audit --tenant "$TENANT" -n 3 | wc -l)" -eq 3 ] || fail "-n 3 did not print the newest three entries"
refused FORBIDDEN $MAPI admin audit
MAPI_TOKEN=$OPERATOR $MAPI admin audit --action tenant.suspend | grep -q "contract ended" || fail "no reason in the audit log"

echo
echo "admin tour: every step passed"
