DROP TABLE webhook_deliveries;
DROP TABLE team_webhooks;
DROP TABLE budget_alerts;
