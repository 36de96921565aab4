package api

import "github.com/fw-serve/fw/dashboard/store"

// loggedModels is GET /api/logged-models: MLflow 3's logged models, newest
// first (?limit=, default 100, at most 1,000), and how many there are.
func (s *Server) loggedModels(c *call) (any, error) {
	limit, e := queryInt(c.rc, "limit", 100, 1, 1000)
	if e != nil {
		return nil, e
	}
	if s.cfg.LoggedModels == nil {
		return map[string]any{"logged_models": []store.LoggedModelSummary{}, "total": 0}, nil
	}
	ms, total, err := s.cfg.LoggedModels(c.ctx, limit)
	if err != nil {
		return nil, err
	}
	return map[string]any{"logged_models": ms, "total": total}, nil
}
