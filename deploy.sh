#!/usr/bin/env bash
# ./deploy.sh ENV [--dry-run]: builds and pushes the control-plane image and
# the four worker images, pins their digests in
# terraform/envs/ENV/images.auto.tfvars.json, then runs terraform init, plan
# and apply of that plan in terraform/envs/ENV and prints its outputs (the
# service URLs).
#
# Rules:
# - ENV is prod or dev, and terraform/envs/ENV/ must exist.
# - The project and region are project_id and region in
#   terraform/envs/ENV/terraform.tfvars; DEPLOY_PROJECT_ID and DEPLOY_REGION
#   give them where the file has none, and may not contradict it.
# - Images go to REGION-docker.pkg.dev/PROJECT/mapi as `mapi` and
#   `worker-BASE`, tagged DEPLOY_TAG (default: the commit, else the time).
#   Cloud Build builds them when gcloud is installed, else the local docker;
#   DEPLOY_BUILDER=cloudbuild|docker chooses.
# - Terraform is given digests, never tags: a deploy rolls out what it built.
# - --dry-run prints every command, `+ ` first, and the file it would write,
#   and runs and writes nothing: no network, docker, gcloud or terraform.
# - Exit codes: 2 a usage or setting to fix, 3 a missing tool, 4 an apply
#   declined at the prompt (asked only when stdin is a terminal); any other
#   is the failing command's own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

readonly ENVS=(prod dev)
# The Job inventory's bases (shared/cloudrun/src/settings.rs); the order is
# the build order of images/cloudbuild.yaml.
readonly BASES=(base-bayes base-ml base-forecast base-dl)
readonly USAGE="usage: ./deploy.sh ENV [--dry-run], ENV one of: ${ENVS[*]}"

die() {
  local code=$1
  shift
  printf 'deploy.sh: %s\n' "$*" >&2
  exit "$code"
}

note() { printf 'deploy.sh: %s\n' "$*" >&2; }

# One command as it would be typed: words quoted only where the shell needs it.
show() {
  local out="+" word
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=@,+-]+$ ]]; then
      out+=" $word"
    else
      out+=" '${word//\'/\'\\\'\'}'"
    fi
  done
  printf '%s\n' "$out"
}

# Prints a command, then runs it unless this is a dry run.
run() {
  show "$@"
  "$dry_run" || "$@"
}

dry_run=false
env_name=""
for arg in "$@"; do
  case $arg in
    --dry-run) dry_run=true ;;
    -h | --help)
      printf '%s\n' "$USAGE"
      exit 0
      ;;
    -*) die 2 "unknown option $arg ($USAGE)" ;;
    *)
      [ -z "$env_name" ] || die 2 "one ENV only, got $env_name and $arg ($USAGE)"
      env_name=$arg
      ;;
  esac
done
[ -n "$env_name" ] || die 2 "$USAGE"
valid=false
for e in "${ENVS[@]}"; do [ "$env_name" = "$e" ] && valid=true; done
"$valid" || die 2 "unknown environment '$env_name': the valid environments are ${ENVS[*]} (terraform/envs/<env>/)"
readonly env_dir="terraform/envs/$env_name"
[ -d "$env_dir" ] || die 2 "$env_dir/ does not exist: the terraform of $env_name must be there before it is deployed"
readonly tfvars="$env_dir/terraform.tfvars"
readonly digests_file="$env_dir/images.auto.tfvars.json"

# The last `KEY = "value"` line of the tfvars file, or nothing.
tfvar() {
  [ -f "$tfvars" ] || return 0
  sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$tfvars" | tail -n 1
}

# Sets the variable $1 from tfvars key $2 or environment variable $3 (see the
# rules above); a dry run without either shows the placeholder $4.
setting() {
  local key=$2 var=$3 placeholder=$4 from_file from_env=${!3:-}
  from_file=$(tfvar "$key")
  if [ -n "$from_file" ] && [ -n "$from_env" ] && [ "$from_file" != "$from_env" ]; then
    die 2 "$var=$from_env contradicts $key = \"$from_file\" in $tfvars: unset $var or change the file"
  fi
  local value=${from_file:-$from_env}
  if [ -z "$value" ]; then
    "$dry_run" || die 2 "no $key: set $key in $tfvars, or export $var"
    note "no $key in $tfvars and $var is unset: showing $placeholder instead"
    value=$placeholder
  fi
  printf -v "$1" '%s' "$value"
}
project="" region=""
setting project project_id DEPLOY_PROJECT_ID PROJECT_ID
setting region region DEPLOY_REGION REGION
[[ $project =~ ^[a-z][-a-z0-9]{4,28}[a-z0-9]$ || $project == PROJECT_ID ]] ||
  die 2 "project_id '$project' is not a Google Cloud project id"
[[ $region =~ ^[a-z]+-[a-z]+[0-9]+$ || $region == REGION ]] ||
  die 2 "region '$region' is not a Google Cloud region (e.g. europe-west1)"
readonly registry="$region-docker.pkg.dev/$project/mapi"

# The build's identity, compiled into every binary (/build-info, log labels):
# the commit, marked -dirty when the tree has changes it does not hold.
commit=$(git rev-parse HEAD 2>/dev/null) || commit=unknown
if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then commit+=-dirty; fi
readonly commit
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
readonly built
identity=(--build-arg "MAPI_GIT_COMMIT=$commit" --build-arg "MAPI_BUILD_TIME=$built")

tag=${DEPLOY_TAG:-}
[ -n "$tag" ] || tag=$(git rev-parse --short=12 HEAD 2>/dev/null) || tag=$(date -u +%Y%m%d-%H%M%S)
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die 2 "DEPLOY_TAG '$tag' is not a Docker tag"
readonly tag

builder=${DEPLOY_BUILDER:-}
if [ -z "$builder" ]; then
  if command -v gcloud >/dev/null; then builder=cloudbuild; else builder=docker; fi
fi
case $builder in
  cloudbuild) tools=(gcloud terraform) ;;
  docker) tools=(docker terraform) ;;
  *) die 2 "DEPLOY_BUILDER=$builder: use cloudbuild or docker" ;;
esac
if ! "$dry_run"; then
  for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || die 3 "$tool is not installed (needed to deploy with DEPLOY_BUILDER=$builder)"
  done
fi

images=(mapi)
for base in "${BASES[@]}"; do images+=("worker-$base"); done

# --- Build and push -------------------------------------------------------
if [ "$builder" = cloudbuild ]; then
  # The repository is made once by hand (README, "Deploying to Google
  # Cloud"): check it before a build that would fail only at its push.
  show gcloud artifacts repositories describe mapi --project "$project" --location "$region" --format 'value(name)'
  "$dry_run" || gcloud artifacts repositories describe mapi --project "$project" --location "$region" \
    --format 'value(name)' >/dev/null ||
    die 2 "no Artifact Registry repository mapi in $project/$region (or no access to it): make it with" \
      "gcloud artifacts repositories create mapi --repository-format=docker --location=$region --project=$project"
  run gcloud builds submit --project "$project" --config images/cloudbuild.yaml \
    --ignore-file .dockerignore --substitutions "_REGISTRY=$registry,_TAG=$tag,_GIT_COMMIT=$commit,_BUILD_TIME=$built" .
else
  # linux/amd64 whatever the workstation: Cloud Run runs nothing else.
  run docker build --platform linux/amd64 -f images/mapi.Dockerfile "${identity[@]}" -t "$registry/mapi:$tag" .
  for base in "${BASES[@]}"; do
    run docker build --platform linux/amd64 -f images/worker.Dockerfile "${identity[@]}" --build-arg "BASE=$base" \
      -t "$registry/worker-$base:$tag" .
  done
  for image in "${images[@]}"; do run docker push "$registry/$image:$tag"; done
fi

# --- Digests ---------------------------------------------------------------
# Appends `"IMAGE": "REGISTRY/IMAGE@sha256:…"` of the tag just pushed to $json.
json=""
add_digest() {
  local image=$1 ref=$registry/$1:$tag found=""
  if [ "$builder" = cloudbuild ]; then
    local describe=(gcloud artifacts docker images describe "$ref" --project "$project"
      --format 'value(image_summary.digest)')
    show "${describe[@]}"
    "$dry_run" || found="$registry/$image@$("${describe[@]}")"
  else
    local inspect=(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$ref")
    show "${inspect[@]}"
    if ! "$dry_run"; then
      found=$("${inspect[@]}")
      found=$(grep -F -m 1 "$registry/$image@" <<<"$found" || true)
    fi
  fi
  if "$dry_run"; then
    found="$registry/$image@sha256:<digest>"
  elif ! [[ $found =~ ^.+@sha256:[0-9a-f]{64}$ ]]; then
    die 1 "no digest for $ref (got '$found'): was it pushed?"
  fi
  json+="${json:+,}"$'\n'"    \"$image\": \"$found\""
}
for image in "${images[@]}"; do add_digest "$image"; done
json=$'{\n  "image_digests": {'"$json"$'\n  }\n}'
printf "+ cat > %s <<'EOF'\n%s\nEOF\n" "$digests_file" "$json"
if ! "$dry_run"; then
  printf '%s\n' "$json" >"$digests_file.partial"
  mv "$digests_file.partial" "$digests_file"
fi

# --- Terraform --------------------------------------------------------------
if "$dry_run"; then
  plan="${TMPDIR:-/tmp}/mapi-deploy.XXXXXX/$env_name.tfplan"
else
  # A plan holds secrets' values: it lives outside the tree, only until the end.
  plan_dir=$(mktemp -d "${TMPDIR:-/tmp}/mapi-deploy.XXXXXX")
  trap 'rm -rf "$plan_dir"' EXIT
  plan="$plan_dir/$env_name.tfplan"
fi
run terraform -chdir="$env_dir" init -input=false
run terraform -chdir="$env_dir" plan -input=false -out="$plan"
if ! "$dry_run" && [ -t 0 ]; then
  read -r -p "Apply this plan to $env_name? [y/N] " answer
  [ "$answer" = y ] || die 4 "nothing applied (answer y to apply, or run with stdin not a terminal)"
fi
run terraform -chdir="$env_dir" apply -input=false "$plan"
run terraform -chdir="$env_dir" output
