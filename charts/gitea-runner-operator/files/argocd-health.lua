-- Argo CD health check for gitea.bpg.pw/RunnerGroup: the argocd-cm key
-- resource.customizations.health.gitea.bpg.pw_RunnerGroup (docs/gitops.md).
-- It reads the status the way kstatus does (Flux's health checks): Reconciling=True, or a
-- generation the status does not describe yet, is Progressing; Stalled=True (an invalid
-- spec, a refused template, a Secret missing past its grace) is Degraded; then Ready decides.
local hs = {}

local function said(cond)
  if cond.reason ~= nil and cond.reason ~= "" then
    return cond.reason .. ": " .. (cond.message or "")
  end
  return cond.message or ""
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator's first status"
  return hs
end

local ready, reconciling, stalled = nil, nil, nil
for _, cond in ipairs(obj.status.conditions or {}) do
  if cond.type == "Ready" then
    ready = cond
  elseif cond.type == "Reconciling" then
    reconciling = cond
  elseif cond.type == "Stalled" then
    stalled = cond
  end
end

local generation = obj.metadata.generation
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = said(reconciling)
elseif generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to apply generation " .. tostring(generation)
elseif stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
elseif ready == nil or ready.status == "Unknown" then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
elseif generation ~= nil and ready.observedGeneration ~= nil
    and ready.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Ready describes generation " .. tostring(ready.observedGeneration)
elseif ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready)
else
  -- Not Ready, yet nothing to wait for and nobody's change needed: Gitea or the API server
  -- failing a group that was working. The operator retries; Argo CD shows why meanwhile.
  hs.status = "Degraded"
  hs.message = said(ready)
end
return hs
