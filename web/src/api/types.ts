// Names for the API's types, generated from the dashboard's OpenAPI document
// (src/api/schema.d.ts, written by `npm run gen:api`; never edit it by hand).
// Pages and components take their API types from here, never declare their
// own (scripts/check-api-types.mjs, `npm run check:types`, keeps it so).
import type { components, paths } from "./schema";

type S = components["schemas"];

// --- Helpers for bodies that have no named schema -------------------------

/** The operation `M` ("get", "post", ...) of the path `P`. */
type Op<P extends keyof paths, M extends keyof paths[P]> = NonNullable<paths[P][M]>;

/** The JSON request body of an operation, e.g. Body<"/api/training/start", "post">. */
export type Body<P extends keyof paths, M extends keyof paths[P]> =
  Op<P, M> extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;

/** The JSON answer of an operation's success status (200, 201 or 202), e.g. Answer<"/api/runs/{id}/logs", "get">. */
export type Answer<P extends keyof paths, M extends keyof paths[P]> =
  Op<P, M> extends { responses: infer R }
    ? R[Extract<keyof R, 200 | 201 | 202>] extends { content: { "application/json": infer A } }
      ? A
      : never
    : never;

// --- Named schemas (components.schemas) -----------------------------------

export type Experiment = S["Experiment"];
export type ExperimentDetail = S["ExperimentDetail"];
export type ExperimentPage = S["ExperimentPage"];
export type Run = S["Run"];
export type RunStatus = Run["status"];
export type RunPage = S["RunPage"];
export type Progress = S["Progress"];
export type Source = S["Source"];
/** A metric's running summary; last/min/max may be "NaN"/"Infinity"/"-Infinity" (read them with stream.ts num()). */
export type Summary = S["Summary"];
export type Series = S["Series"];
export type Bucket = S["Bucket"];
export type LogLine = S["LogLine"];
export type Comparison = S["Comparison"];
export type SystemStatus = S["SystemStatus"];
export type SystemSample = S["SystemSample"];
export type SystemHistory = S["SystemHistory"];
export type Job = S["Job"];
export type JobState = Job["state"];
export type ExportJob = S["ExportJob"];
export type ExportRequest = S["ExportRequest"];
export type ExportFormat = ExportRequest["format"];
export type Model = S["Model"];
export type ModelVersion = S["ModelVersion"];
export type ModelSource = S["ModelSource"];
export type TensorSpec = S["TensorSpec"];
export type Deployment = S["Deployment"];
export type DeployTarget = NonNullable<Deployment["target"]>;
export type SharedServer = S["SharedServer"];
export type SharedVersion = S["SharedVersion"];
export type Checkpoint = S["Checkpoint"];
export type CheckpointRef = S["CheckpointRef"];
export type Artifact = S["Artifact"];
export type ActivityEvent = S["ActivityEvent"];
export type Recipe = S["Recipe"];
export type RecipeParam = S["RecipeParam"];
export type Prediction = S["Prediction"];
export type ServedModel = S["ServedModel"];
export type ApiErrorBody = S["Error"];
/** A span of a request trace the dashboard received over OTLP (a deployment's request, its phases, its engine call). */
export type Span = S["Span"];
/** A request/response record a deployment logged (fw serve --log-payloads), and one of its tensors. */
export type PayloadRecord = S["PayloadRecord"];
export type PayloadTensor = S["PayloadTensor"];
/** The drift of a deployment's traffic against a reference window. */
export type DriftReport = S["DriftReport"];

// --- Path bodies without a named schema -----------------------------------

/** GET /api/runs/{id}/metrics. */
export type RunMetrics = Answer<"/api/runs/{id}/metrics", "get">;
/** GET /api/runs/{id}/logs. */
export type RunLogs = Answer<"/api/runs/{id}/logs", "get">;
/** GET /api/runs/{id}/checkpoints. */
export type RunCheckpoints = Answer<"/api/runs/{id}/checkpoints", "get">;
/** GET /api/runs/{id}/artifacts. */
export type RunArtifacts = Answer<"/api/runs/{id}/artifacts", "get">;
/** GET /api/activity. */
export type ActivityList = Answer<"/api/activity", "get">;
/** GET /api/training. */
export type JobList = Answer<"/api/training", "get">;
/** GET /api/training/recipes. */
export type RecipeList = Answer<"/api/training/recipes", "get">;
/** POST /api/training/start: the request. */
export type StartTraining = Body<"/api/training/start", "post">;
/** POST /api/training/start: the answer. */
export type TrainingStarted = Answer<"/api/training/start", "post">;
/** GET /api/models. */
export type ModelList = Answer<"/api/models", "get">;
/** POST /api/models/export: the answer. */
export type ExportStarted = Answer<"/api/models/export", "post">;
/** POST /api/models/{name}/deploy: the request. */
export type DeployRequest = Body<"/api/models/{name}/deploy", "post">;
/** GET /api/deployments. */
export type DeploymentList = Answer<"/api/deployments", "get">;
/** GET /api/traces: a deployment's requests (server spans). */
export type TraceList = Answer<"/api/traces", "get">;
/** GET /api/traces/{trace_id}: one trace's spans. */
export type TraceSpans = Answer<"/api/traces/{trace_id}", "get">;
export type TraceSummary = S["TraceSummary"];
export type RunTraceList = Answer<"/api/runs/{id}/traces", "get">;
/** GET /api/logged-models: MLflow 3's logged models, newest first. */
export type LoggedModelList = Answer<"/api/logged-models", "get">;
export type LoggedModelSummary = S["LoggedModelSummary"];
/** GET /api/payloads: a deployment's logged records, newest first. */
export type PayloadList = Answer<"/api/payloads", "get">;
