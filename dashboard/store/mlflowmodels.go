package store

// LoggedModelSummary is an MLflow 3 logged model (mlflow.<flavor>.log_model,
// autologging's models) as fw's own API lists it for the Models page (GET
// /api/logged-models): what a user picks a model by, and where it came from.
type LoggedModelSummary struct {
	ModelID string `json:"model_id"`
	Name    string `json:"name"`
	// ExperimentID and Experiment are fw's experiment (its ID and name);
	// MLflowExperimentID is MLflow's ("0" for Default).
	ExperimentID       string            `json:"experiment_id,omitempty"`
	Experiment         string            `json:"experiment,omitempty"`
	MLflowExperimentID string            `json:"mlflow_experiment_id"`
	ModelType          string            `json:"model_type,omitempty"`
	SourceRunID        string            `json:"source_run_id,omitempty"`
	Status             string            `json:"status"`
	Created            int64             `json:"created_ms"`
	Updated            int64             `json:"updated_ms"`
	Tags               map[string]string `json:"tags,omitempty"`
	// ArtifactURI is where its files are: MLflow's
	// mlflow-artifacts:/<experiment>/models/<id>/artifacts.
	ArtifactURI string `json:"artifact_uri"`
}
