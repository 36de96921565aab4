// Names for the API's types, generated from the dashboard's OpenAPI document
// (src/api/schema.d.ts, written by `npm run gen:api`; never edit it by hand).
import type { components } from "./schema";

type S = components["schemas"];

export type Experiment = S["Experiment"];
export type ExperimentDetail = S["ExperimentDetail"];
export type ExperimentPage = S["ExperimentPage"];
export type Run = S["Run"];
export type RunPage = S["RunPage"];
export type Summary = S["Summary"];
export type Series = S["Series"];
export type LogLine = S["LogLine"];
export type Comparison = S["Comparison"];
export type SystemStatus = S["SystemStatus"];
export type Job = S["Job"];
export type ExportJob = S["ExportJob"];
export type Model = S["Model"];
export type ModelVersion = S["ModelVersion"];
export type Deployment = S["Deployment"];
export type ApiErrorBody = S["Error"];
