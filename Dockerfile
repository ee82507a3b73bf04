# One image for the example site, its Celery worker and beat, and the demo assistant server.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.txt pyproject.toml README.md ./
COPY nitro_assistants ./nitro_assistants
RUN pip install -r requirements.txt
COPY . .
RUN DJANGO_SETTINGS_MODULE=reviewsite.settings python manage.py collectstatic --noinput -v 0
EXPOSE 8000 2024
CMD ["gunicorn", "reviewsite.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3"]
