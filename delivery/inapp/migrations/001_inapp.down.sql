DROP TABLE inapp_notifications;
